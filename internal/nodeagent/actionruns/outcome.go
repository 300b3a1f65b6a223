package actionruns

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/actionexec"
	"sensorium.dev/workbench/internal/nodeagent/artifactcapture"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/runs"
	"sensorium.dev/workbench/internal/platform/artifactout"
	"sensorium.dev/workbench/internal/platform/egress"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/statusapply"
)

// The outcome of a started run: awaited, its envelope finished, its artifacts recorded
// and stored before status shows it.

// await waits for the process, finishes the envelope (commit, promotion), persists the
// outcome and wakes the reconciler to write it.
func (r *Room) await(run *wbv1.ActionRun, act *actions.Action, h *procexec.Handle, prep *actionexec.Run, started time.Time) {
	res, runErr := h.Wait()
	o := &actionOutcome{Started: started, SignalOrigin: string(res.SignalOrigin),
		StdoutBytes: res.OutputBytesSeen, StderrBytes: res.StderrBytesSeen, Truncated: res.Truncated || res.StderrTruncated}
	sum := sha256.Sum256(res.Output)
	o.OutputDigest = "sha256:" + hex.EncodeToString(sum[:])
	o.Stdout = truncateUTF8(string(res.Output), maxStatusStdout)
	e := runs.Classify(runs.Exit{Err: runErr, ExitCode: res.ExitCode, Signal: res.Signal, SignalOrigin: res.SignalOrigin,
		CleanupComplete: res.CleanupComplete, Noun: "action",
		Stopping: res.SignalOrigin == procexec.OriginCancel && r.stopping.Load()})
	o.Phase = map[runs.End]wbv1.ActionRunPhase{runs.EndSucceeded: wbv1.ActionRunSucceeded, runs.EndFailed: wbv1.ActionRunFailed,
		runs.EndTimedOut: wbv1.ActionRunTimedOut, runs.EndCancelled: wbv1.ActionRunCancelled, runs.EndInterrupted: wbv1.ActionRunFailed}[e.End]
	o.RefusalCode, o.Message, o.ExitCode, o.SignalOrigin = string(e.Code), e.Message, e.ExitCode, e.SignalOrigin
	if e.End == runs.EndTimedOut {
		o.RefusalCode = string(actuation.CodeActionTimeout) // an action's timeout is a refusal of its class
	}
	capt, ferr := prep.Finish(o.Phase != wbv1.ActionRunSucceeded)
	applyCapture(o, capt)
	if ferr != nil && o.RefusalCode == "" {
		o.Phase, o.RefusalCode, o.Message = wbv1.ActionRunFailed, string(actuation.CodeCleanupIncomplete), "finishing the envelope: "+ferr.Error()
	}
	if o.Phase == wbv1.ActionRunSucceeded && o.RefusalCode == "" {
		if ptrs, ref := actions.ResultPointers(act, res.Output); ref != nil {
			o.Phase, o.RefusalCode, o.Message = wbv1.ActionRunFailed, string(ref.Code), ref.Error()
		} else {
			o.ResultPointers = ptrs
		}
	}
	if capt.Artifacts != nil && capt.Code == "" && ferr == nil {
		if err := r.createArtifacts(run, capt.Artifacts.Artifacts, o); err != nil && o.RefusalCode == "" {
			o.Phase, o.RefusalCode, o.Message = wbv1.ActionRunFailed, string(actuation.CodeStartFailed), "recording artifacts: "+err.Error()
		}
	}
	o.Message += e.Cleanup
	o.Completed = time.Now()
	r.record(string(run.UID), o)
	nodekit.Wake(r.d.Ctx, r.wake, run)
}

// applyCapture moves the envelope's capture into the outcome: a cap reached while
// writing or producing fails the run with its code (nothing was committed or promoted).
func applyCapture(o *actionOutcome, c actionexec.Capture) {
	if w := c.Writes; w != nil {
		for i, f := range w.Files {
			if i >= maxTouchedFiles {
				o.TouchedTruncated = true
				break
			}
			o.TouchedFiles = append(o.TouchedFiles, wbv1.TouchedFile{Path: f.Path, Size: f.Size, Digest: wbv1.Digest(f.SHA256)})
		}
	}
	if tr := c.Transcript; tr != nil {
		for i, cn := range tr.Connections {
			if i >= maxTranscript {
				break
			}
			code := cn.Code
			if code == "" && cn.Outcome != egress.OutcomeOK {
				code = cn.Outcome
			}
			proto := wbv1.EgressProtocol(cn.Protocol)
			if proto == "" {
				proto = "tcp" // not a declared endpoint: what was asked for is a TCP connection
			}
			o.Transcript = append(o.Transcript, wbv1.ConnectionRecord{Host: truncateUTF8(cn.Host, 253), Port: int32(cn.Port), Protocol: proto,
				BytesOut: cn.BytesOut, BytesIn: cn.BytesIn, DurationMillis: cn.Duration.Milliseconds(), Code: code})
		}
		for _, q := range tr.DNS {
			if !q.Allowed && len(o.Transcript) < maxTranscript {
				o.Transcript = append(o.Transcript, wbv1.ConnectionRecord{Host: truncateUTF8(q.Name, 253), Port: 53, Protocol: "udp", Code: string(actuation.CodeEgressDNSNameForbidden)})
			}
		}
	}
	if c.Code != "" && (o.RefusalCode == "" || o.Phase == wbv1.ActionRunSucceeded || o.Phase == wbv1.ActionRunFailed) {
		if o.RefusalCode == "" {
			o.RefusalCode = c.Code
			o.Message = c.Code + ": " + c.Message + " (" + o.Message + ")"
			if o.Phase == wbv1.ActionRunSucceeded {
				o.Phase = wbv1.ActionRunFailed
			}
		}
	}
}

// createArtifacts records each promoted artifact as an Artifact object of the run's
// environment on this node (owned by the run) and lists it in the outcome.
func (r *Room) createArtifacts(run *wbv1.ActionRun, arts []artifactout.Artifact, o *actionOutcome) error {
	ctx := context.Background()
	if r.d.Ctx != nil {
		ctx = r.d.Ctx
	}
	for i, art := range arts {
		if i >= maxArtifactRefs {
			break
		}
		name := artifactName(run.Name, i)
		obj := &wbv1.Artifact{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: run.Namespace,
			Labels: nodekit.WithCorrelation(map[string]string{wbv1.NodeLabel: r.d.NodeName}, run)},
			Spec: wbv1.ArtifactSpec{EnvironmentRef: run.Spec.EnvironmentRef, Source: wbv1.ArtifactSource("action")}}
		if l := run.Labels[wbv1.EnvironmentLabel]; l != "" {
			obj.Labels[wbv1.EnvironmentLabel] = l
		}
		if err := controllerutil.SetOwnerReference(run, obj, r.d.Client.Scheme()); err != nil {
			return err
		}
		// Create fills obj from the server's answer; an artifact left by an earlier pass is
		// read from the API server (the cache may not hold it yet).
		if err := r.d.Client.Create(ctx, obj); apierrors.IsAlreadyExists(err) {
			if err := r.d.Reader.Get(ctx, client.ObjectKeyFromObject(obj), obj); err != nil {
				return fmt.Errorf("reading artifact %s/%s: %w", run.Namespace, name, err)
			}
		} else if err != nil {
			return fmt.Errorf("creating artifact %s/%s: %w", run.Namespace, name, err)
		}
		cur := nodekit.ArtifactOwned(&obj.Status)
		next := cur
		until := metav1.NewTime(obj.CreationTimestamp.Add(artifactcapture.DefaultRetention))
		next.Digest, next.Size, next.NodeName, next.RetainedUntil = wbv1.Digest(art.SHA256), art.Size, r.d.NodeName, &until
		next.ObservedGeneration = obj.Generation
		statusapply.Set(&next.Conditions, &next.Conditions, statusapply.Cond(wbv1.ConditionReady, true, "Stored",
			fmt.Sprintf("%d bytes (%s) produced by action run %s, held by node %s", art.Size, art.MediaType, run.Name, r.d.NodeName), obj.Generation))
		if _, err := statusapply.Apply(ctx, r.d.Client, nodekit.FieldManager+"artifact", obj, cur, next); err != nil {
			return err
		}
		o.Artifacts = append(o.Artifacts, wbv1.ArtifactRef{Name: wbv1.ObjectName(name), Digest: wbv1.Digest(art.SHA256),
			MediaType: art.MediaType, Size: art.Size, Role: truncateUTF8(art.Path, 253)})
	}
	return nil
}

func artifactName(run string, i int) string {
	suffix := fmt.Sprintf("-a%d", i)
	if len(run)+len(suffix) <= 253 {
		return run + suffix
	}
	sum := sha256.Sum256([]byte(run))
	return run[:253-len(suffix)-9] + "-" + hex.EncodeToString(sum[:4]) + suffix
}

func (r *Room) record(uid string, o *actionOutcome) {
	err := r.runs.Record(uid, o, func(la *liveAction, o *actionOutcome) {
		if la.Stopping && o.Phase == wbv1.ActionRunFailed && o.ExitCode == nil && o.RefusalCode != string(actuation.CodeInterrupted) {
			o.Phase, o.RefusalCode, o.Message = wbv1.ActionRunCancelled, "", "cancelled: the run was deleted or cancelled ("+o.Message+")"
		}
	})
	if err != nil && r.d.Ctx != nil {
		ctrl.LoggerFrom(r.d.Ctx).Error(err, "Storing an action run outcome; the next pass retries", "actionRun", uid)
	}
}

func truncateUTF8(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "")
}
