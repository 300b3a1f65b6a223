package agent

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
)

// openEnv asks env's backend for the environment's executor and file access (the
// backends.Env port): the one place that says whether the environment's processes and
// roots live on the host or in a VM guest. An unregistered backend is refused.
func (a *Agent) openEnv(env *wbv1.Environment) (backends.Env, error) {
	b, ok := a.backends.Get(string(env.Spec.Backend))
	if !ok {
		return backends.Env{}, actuation.Refusef(actuation.CodeCapabilityMismatch, "backend %s is not registered on this node", env.Spec.Backend)
	}
	return b.Open(string(env.UID))
}

// guestEnvOf is env's guest executor, nil when its processes run in the host sandbox (or
// its backend offers no executor: the host path then refuses on its roots, as before).
func (a *Agent) guestEnvOf(env *wbv1.Environment) backends.GuestEnv {
	e, err := a.openEnv(env)
	if err != nil {
		return nil
	}
	return e.Guest
}

// startGuest runs an admitted command inside the environment's guest with the host rules:
// the store records the start before anything is dispatched, the one outcome is persisted
// before status shows it, and a record without a live handle after a restart ends the
// command Failed/interrupted (never re-run). The process itself lives in the guest; the
// store records no host pid for it.
func (r *commandReconciler) startGuest(p *cmdPass, g backends.GuestEnv, envUID string, sessUID string, gc backends.GuestCommand, rg *ring.Ring) error {
	a := r.a
	cmd := p.cmd
	// The cap check and the command's entry are one reservation (concurrent passes never
	// exceed the cap).
	running, ok := a.commands.ReserveGuest(a.cfg.Caps.ConcurrentCommands)
	if !ok {
		p.refuse(string(actuation.CodeCommandCapReached), fmt.Sprintf("%d guest commands run on this node (cap %d)", running, a.cfg.Caps.ConcurrentCommands))
		return nil
	}
	reserved := true
	defer func() {
		if reserved {
			a.commands.ReleaseGuest()
		}
	}()
	// The creator's share of the concurrent-command slots (shares.go), held until the
	// guest command's outcome is recorded.
	release, code, msg := a.acquireShare(context.Background(), a.shares.commands, commandCapName, actuation.CodeCommandCapReached, cmd.Namespace, cmd.Spec.CreatedBy)
	if code != "" {
		p.refuse(code, msg)
		return nil
	}
	defer func() {
		if reserved {
			release()
		}
	}()
	rec, proceed, err := a.recordStart(p, sessUID, nil) // claimed before (startGuest's caller)
	if err != nil || !proceed {
		return err
	}
	now := metav1.Now()
	rec.Phase, rec.UpdatedAt = string(wbv1.CommandRunning), now.Time
	if err := a.store.Commands().Put(rec); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), gc.Wait)
	seqFrom := rg.LastSeq() + 1
	a.commands.EnterGuest(string(cmd.UID), &liveCommand{Key: client.ObjectKeyFromObject(cmd), EnvUID: envUID, Started: now.Time, Cancel: cancel,
		Finished: make(chan struct{}), Out: rg, SeqFrom: seqFrom})
	reserved = false // the reservation is now the command's own entry
	go func() {
		defer release()
		a.awaitGuestCommand(ctx, cancel, cmd.DeepCopy(), g, gc, rg, seqFrom, now.Time)
	}()
	p.next.StartTime, p.next.NodeName = &now, a.cfg.NodeName
	p.set(wbv1.ConditionStarted, true, "Started", "dispatched to the guest agent of the environment's VM (no network, no host share)")
	return nil
}

// awaitGuestCommand runs the guest spawn to completion and records its one outcome.
func (a *Agent) awaitGuestCommand(ctx context.Context, cancel context.CancelFunc, cmd *wbv1.TerminalCommand, g backends.GuestEnv,
	gc backends.GuestCommand, rg *ring.Ring, seqFrom uint64, started time.Time) {
	defer cancel()
	o := &commandOutcome{Started: started}
	var out []byte
	// The spawn's opID names the process for a guest-side signal; a command UID is 36
	// bytes of [0-9a-f-].
	res, err := g.Spawn(ctx, "cmd-"+string(cmd.UID), gc)
	if err == nil {
		out = append(res.Stdout, res.Stderr...)
		o.Truncated = res.Truncated
		switch {
		case res.TimedOut:
			o.Phase, o.SignalOrigin, o.Message = wbv1.CommandTimedOut, "timeout", "timed out; the guest terminated the process group"
		case res.Signal != "":
			o.Phase, o.Message = wbv1.CommandFailed, "killed by "+res.Signal+" in the guest"
		case res.ExitCode == 0:
			o.Phase, o.Message = wbv1.CommandSucceeded, "exited 0 in the guest"
		default:
			o.Phase, o.Message = wbv1.CommandFailed, fmt.Sprintf("exited %d in the guest", res.ExitCode)
		}
		if res.Signal == "" {
			code := int32(res.ExitCode)
			o.ExitCode, o.SignalOrigin = &code, "exit"
			if res.TimedOut {
				o.SignalOrigin = "timeout"
			}
		}
	}
	if err != nil {
		o.Phase, o.RefusalCode, o.Message = wbv1.CommandFailed, string(g.RefusalCode(err)), err.Error()
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
	a.recordAfterCommand(cmd, cmd.Labels[wbv1.EnvironmentLabel], o, out) // seed 004
	a.recordOutcome(string(cmd.UID), o)
	a.commandFinished()
	a.wake(a.wakeCommands, cmd)
}

// guestRelay turns a shell-profile session of a VM environment into the host session that
// runs this executable as the guest PTY relay (internal/backends/guestenv): the program,
// its curated environment and its working directory (the root beneath the guest root) go
// to the guest; on the host only the relay runs.
func (a *Agent) guestRelay(env *wbv1.Environment, ts *wbv1.TerminalSession, argv, kv []string, guestDir string) ([]string, []string, string, string, string) {
	g := a.guestEnvOf(env)
	if g == nil {
		return nil, nil, "", string(actuation.CodeCapabilityMismatch), fmt.Sprintf("backend %s offers no guest terminal", env.Spec.Backend)
	}
	rargv, renv, err := g.Relay(a.helper, backends.RelayRequest{SessionID: "s-" + string(ts.UID), Argv: argv, Env: kv, Cwd: guestDir})
	if err != nil {
		code, msg := string(actuation.CodeOf(err)), err.Error()
		var ref *actuation.Refusal
		if errors.As(err, &ref) {
			msg = ref.Message
		}
		if code == "" {
			code = string(actuation.CodeEnvironmentUnavailable)
		}
		return nil, nil, "", code, msg
	}
	return rargv, renv, "/", "", ""
}
