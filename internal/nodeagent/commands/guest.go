package commands

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/runs"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// startGuest runs an admitted command inside the environment's guest with the host rules:
// the store records the start before anything is dispatched, the one outcome is persisted
// before status shows it, and a record without a live handle after a restart ends the
// command Failed/interrupted (never re-run). The process itself lives in the guest; the
// store records no host pid for it.
func (r *Room) startRemote(p *cmdPass, rc backends.RemoteCommand, envUID string, sessUID string, rg *ring.Ring) error {
	cmd := p.cmd
	// The cap check and the command's entry are one reservation (concurrent passes never
	// exceed the cap).
	running, ok := r.d.Table.ReserveGuest(r.d.ConcurrentCommands)
	if !ok {
		p.refuse(string(actuation.CodeCommandCapReached), fmt.Sprintf("%d guest commands run on this node (cap %d)", running, r.d.ConcurrentCommands))
		return nil
	}
	reserved := true
	defer func() {
		if reserved {
			r.d.Table.ReleaseGuest()
		}
	}()
	// The creator's share of the concurrent-command slots (the agent's shares.go, Deps.AcquireShare), held until the
	// guest command's outcome is recorded.
	release, code, msg := r.d.AcquireShare(context.Background(), cmd.Namespace, cmd.Spec.CreatedBy)
	if code != "" {
		p.refuse(code, msg)
		return nil
	}
	defer func() {
		if reserved {
			release()
		}
	}()
	rec, proceed, err := r.recordStart(p, sessUID, nil) // claimed before (startGuest's caller)
	if err != nil || !proceed {
		return err
	}
	now := metav1.Now()
	rec.Phase, rec.UpdatedAt = string(wbv1.CommandRunning), now.Time
	if err := r.d.Store.Commands().Put(rec); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), rc.Wait())
	seqFrom := rg.LastSeq() + 1
	r.d.Table.EnterGuest(string(cmd.UID), &Live{Key: client.ObjectKeyFromObject(cmd), EnvUID: envUID, Started: now.Time, Cancel: cancel,
		Finished: make(chan struct{}), Out: rg, SeqFrom: seqFrom})
	reserved = false // the reservation is now the command's own entry
	go func() {
		defer release()
		r.awaitRemote(ctx, cancel, cmd.DeepCopy(), rc, rg, seqFrom, now.Time)
	}()
	p.next.StartTime, p.next.NodeName = &now, r.d.NodeName
	p.set(wbv1.ConditionStarted, true, "Started", "dispatched to the guest agent of the environment's VM (no network, no host share)")
	return nil
}

// awaitRemote runs a remote (guest) command to completion and records its one outcome.
func (r *Room) awaitRemote(ctx context.Context, cancel context.CancelFunc, cmd *wbv1.TerminalCommand, rc backends.RemoteCommand,
	rg *ring.Ring, seqFrom uint64, started time.Time) {
	defer cancel()
	o := &Outcome{Started: started}
	var out []byte
	// The spawn's opID names the process for a guest-side signal; a command UID is 36
	// bytes of [0-9a-f-].
	res, err := rc.Run(ctx, "cmd-"+string(cmd.UID))
	x := runs.Exit{Err: err, Remote: true}
	if err == nil {
		out = append(res.Stdout, res.Stderr...)
		o.Truncated = res.Truncated
		x.ExitCode, x.Signal = res.ExitCode, res.Signal
		switch {
		case res.TimedOut:
			x.SignalOrigin = procexec.OriginTimeout
		case res.Signal == "":
			x.SignalOrigin = procexec.OriginExit
		}
	}
	o.applyEnding(runs.Classify(x))
	if err != nil {
		o.RefusalCode = string(rc.RefusalCode(err))
		if errors.Is(err, guestclient.ErrUnknownOutcome) {
			o.RefusalCode, o.Message = "", "outcome unknown: "+err.Error()
		}
	}
	o.Completed = time.Now()
	o.Bytes = int64(len(out))
	sum := sha256.Sum256(out)
	o.OutputDigest = "sha256:" + hex.EncodeToString(sum[:])
	if len(out) > 0 {
		if last, aerr := rg.Append(ring.KindOutput, out); aerr == nil {
			o.SeqFrom, o.SeqTo = seqFrom, last
		}
	}
	r.d.RecordAfter(cmd, cmd.Labels[wbv1.EnvironmentLabel], o, out) // seed 004
	r.recordOutcome(string(cmd.UID), o)
	r.d.Finished()
	r.d.Wake(cmd)
}
