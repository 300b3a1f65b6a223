package recordings

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/skills"
	"sensorium.dev/workbench/internal/skillsapi"
	"sensorium.dev/workbench/internal/statusapply"
)

const (
	// recentEdgesInStatus is how many of the latest edges a Recording's status summarizes.
	recentEdgesInStatus = 16
	// changesInStatus bounds the path changes shown per summarized edge.
	changesInStatus = 64
	// maxTraceBytes caps a stored trace.
	maxTraceBytes = 64 << 20
	// traceRetention keeps a stopped recording's trace artifact.
	traceRetention = 7 * 24 * time.Hour
)

func objectMeta(k types.NamespacedName) metav1.ObjectMeta {
	return metav1.ObjectMeta{Namespace: k.Namespace, Name: k.Name}
}

func recordingOwned(s *wbv1.RecordingStatus) wbv1.RecordingStatus {
	o := *s.DeepCopy()
	o.Conditions = statusapply.Owned(s.Conditions, wbv1.ConditionActive, wbv1.ConditionCompleted)
	return o
}

type recordingReconciler struct{ a *Room }

// Reconcile starts, reports and stops the recordings bound to this node: start computes
// the initial workspace state and opens the trace; while active the status shows counts,
// digests and the latest edges; stop stores the trace as a content-addressed Artifact.
func (r *recordingReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := r.a
	var rec wbv1.Recording
	if err := a.d.Client.Get(ctx, req.NamespacedName, &rec); err != nil {
		if client.IgnoreNotFound(err) == nil {
			a.dropRecording(req.NamespacedName)
		}
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if rec.Labels[wbv1.NodeLabel] != a.d.NodeName || rec.Status.TraceArtifactRef != "" || rec.Status.Refusal != nil {
		if rec.Status.TraceArtifactRef != "" {
			a.dropRecording(req.NamespacedName)
		}
		return ctrl.Result{}, nil
	}
	if !rec.DeletionTimestamp.IsZero() {
		a.dropRecording(req.NamespacedName)
		return ctrl.Result{}, nil
	}
	cur, next := recordingOwned(&rec.Status), recordingOwned(&rec.Status)
	set := func(t string, ok bool, reason, msg string) {
		statusapply.Set(&next.Conditions, &next.Conditions, statusapply.Cond(t, ok, reason, msg, rec.Generation))
	}
	ar, err := a.activeRecordingFor(ctx, &rec)
	switch {
	case errors.Is(err, nodekit.ErrNotYet):
		return ctrl.Result{RequeueAfter: 2 * time.Second}, nil
	case string(actuation.CodeOf(err)) != "" || actuation.CodeOf(err) != "":
		code := string(actuation.CodeOf(err))
		if code == "" {
			code = string(actuation.CodeOf(err))
		}
		next.Refusal = &wbv1.Refusal{Code: code, Message: statusapply.Truncate(err.Error(), 1024)}
		next.Phase = wbv1.RecordingPhaseFailed
		set(wbv1.ConditionActive, false, wbv1.ReasonFailed, statusapply.Truncate(err.Error(), 1024))
		_, err := statusapply.Apply(ctx, a.d.Client, nodekit.FieldManager+"recording", &rec, cur, next)
		return ctrl.Result{}, err
	case err != nil:
		return ctrl.Result{}, err
	}
	a.rec.mu.Lock()
	fillRecordingStatus(&next, ar)
	recErr := ar.err
	a.rec.mu.Unlock()
	next.NodeName, next.ObservedGeneration = a.d.NodeName, rec.Generation
	if recErr != nil && next.Refusal == nil {
		code := string(actuation.CodeOf(recErr))
		if code == "" {
			code = string(actuation.CodeOf(recErr))
		}
		if code == "" {
			code = "source-failed"
		}
		next.Refusal = &wbv1.Refusal{Code: code, Message: statusapply.Truncate(recErr.Error(), 1024)}
	}
	if rec.Spec.DesiredState == wbv1.RecordingStopped || recErr != nil {
		if err := a.stopRecording(ctx, &rec, ar, &next); err != nil {
			return ctrl.Result{}, err
		}
		set(wbv1.ConditionActive, false, "Stopped", "recording stopped; the trace is stored")
		set(wbv1.ConditionCompleted, recErr == nil, "TraceStored", fmt.Sprintf("%d edges stored as artifact %s", next.Edges, next.TraceArtifactRef))
		next.Phase = wbv1.RecordingPhaseStopped
		if recErr != nil {
			next.Phase = wbv1.RecordingPhaseFailed
		}
	} else {
		set(wbv1.ConditionActive, true, "Recording", fmt.Sprintf("recording admitted work on environment %s", rec.Spec.EnvironmentRef))
		next.Phase = wbv1.RecordingPhaseRecording
	}
	if _, err := statusapply.Apply(ctx, a.d.Client, nodekit.FieldManager+"recording", &rec, cur, next); err != nil {
		return ctrl.Result{}, err
	}
	if next.TraceArtifactRef != "" {
		_ = os.Remove(ar.file) // the trace is stored and published
		a.dropRecording(req.NamespacedName)
	}
	return ctrl.Result{}, nil
}

// activeRecordingFor returns the in-memory recording, loading its trace file after a
// restart or starting it (initial state) the first time.
func (a *Room) activeRecordingFor(ctx context.Context, rec *wbv1.Recording) (*activeRecording, error) {
	uid := string(rec.UID)
	a.rec.mu.Lock()
	ar := a.rec.active[uid]
	a.rec.mu.Unlock()
	if ar != nil {
		return ar, nil
	}
	if err := os.MkdirAll(a.rec.dir, 0o700); err != nil {
		return nil, fmt.Errorf("creating %s: %w", a.rec.dir, err)
	}
	ar = &activeRecording{key: client.ObjectKeyFromObject(rec), uid: uid, env: string(rec.Spec.EnvironmentRef),
		file: filepath.Join(a.rec.dir, uid+".json")}
	if rec.Spec.SessionRef != nil {
		ar.session = string(*rec.Spec.SessionRef)
	}
	if raw, err := os.ReadFile(ar.file); err == nil {
		var t skills.Trace
		if err := json.Unmarshal(raw, &t); err != nil {
			return nil, fmt.Errorf("reading the trace of Recording %s from %s: %w", ar.key, ar.file, err)
		}
		ar.trace = &t // the last state is unknown after a restart: no out-of-band gap is claimed
	} else {
		if rec.Status.TraceID != "" {
			// Started by a process whose trace file is gone: the trace cannot be trusted.
			return nil, actuation.Refuse(actuation.CodeTraceInvalid, "", "recording %s started on this node but its trace file is missing", ar.key).Err()
		}
		if rec.Spec.DesiredState == wbv1.RecordingStopped {
			return nil, actuation.Refuse(actuation.CodeTraceInvalid, "", "recording %s was stopped before it started", ar.key).Err()
		}
		var env wbv1.Environment
		if err := a.d.Client.Get(ctx, types.NamespacedName{Namespace: rec.Namespace, Name: ar.env}, &env); err != nil {
			if apierrors.IsNotFound(err) {
				return nil, nodekit.ErrNotYet
			}
			return nil, err
		}
		if _, ok := a.d.MountedRoots(string(env.UID)); !ok {
			return nil, nodekit.ErrNotYet
		}
		st, err := a.workspaceState(ctx, &env)
		if err != nil {
			return nil, err
		}
		ar.trace = &skills.Trace{Schema: skills.TraceSchema, TraceID: skills.NewID(), Recording: ar.key.String(), Environment: ar.env,
			Backend: string(env.Spec.Backend), StartedAt: time.Now().UTC().Truncate(time.Second),
			InitialState: skills.InitialStateRef(st), Edges: []skills.Edge{}}
		ar.last = st
		if err := ar.save(); err != nil {
			return nil, fmt.Errorf("saving the trace of Recording %s: %w", ar.key, err)
		}
	}
	a.rec.mu.Lock()
	defer a.rec.mu.Unlock()
	if cur := a.rec.active[uid]; cur != nil {
		return cur, nil
	}
	a.rec.active[uid] = ar
	return ar, nil
}

func fillRecordingStatus(st *wbv1.RecordingStatus, ar *activeRecording) {
	t := ar.trace
	st.TraceID, st.Backend = t.TraceID, t.Backend
	st.InitialStateDigest = wbv1.Digest(t.InitialState.Digest)
	st.Edges = int32(len(t.Edges))
	st.Counts = wbv1.RecordingEdgeCounts{}
	st.LastStateDigest = wbv1.Digest(t.InitialState.Digest)
	if st.StartTime == nil {
		st.StartTime = &metav1.Time{Time: t.StartedAt}
	}
	for _, e := range t.Edges {
		switch e.Kind {
		case skills.EdgeCommand:
			st.Counts.Commands++
		case skills.EdgePatch:
			st.Counts.Patches++
		case skills.EdgeWait:
			st.Counts.Waits++
		case skills.EdgeProbe:
			st.Counts.Probes++
		}
		st.LastStateDigest = wbv1.Digest(e.StateAfter)
	}
	st.RecentEdges = nil
	from := max(0, len(t.Edges)-recentEdgesInStatus)
	for _, e := range t.Edges[from:] {
		re := wbv1.RecordedEdge{Seq: int32(e.Seq), Kind: wbv1.SkillStepKind(e.Kind), Object: wbv1.ObjectName(e.Object), CorrelationID: e.CorrelationID,
			StateBefore: wbv1.Digest(e.StateBefore), StateAfter: wbv1.Digest(e.StateAfter), Phase: e.Outcome.Phase,
			ExitCode: e.Outcome.ExitCode, Code: e.Outcome.Code, Authorization: string(e.Authorization.Kind) + ":" + e.Authorization.Ref}
		if c := e.Command; c != nil {
			re.ArgvDigest, re.OutputDigest = wbv1.Digest(c.ArgvDigest), wbv1.Digest(c.OutputDigest)
		}
		re.Changes, re.ChangesTruncated = skillsapi.RecordedChanges(e.Changes, changesInStatus)
		re.OutOfBand, _ = skillsapi.RecordedChanges(e.OutOfBand, changesInStatus)
		st.RecentEdges = append(st.RecentEdges, re)
	}
}

// stopRecording stops recording (no edge is added after this), stores the trace in the
// node's content-addressed store and publishes it as an Artifact.
func (a *Room) stopRecording(ctx context.Context, rec *wbv1.Recording, ar *activeRecording, next *wbv1.RecordingStatus) error {
	a.rec.mu.Lock()
	if ar.trace.StoppedAt.IsZero() {
		ar.trace.StoppedAt = time.Now().UTC().Truncate(time.Second)
		_ = ar.save()
	}
	delete(a.rec.active, ar.uid) // no more edges
	raw, err := json.Marshal(ar.trace)
	a.rec.mu.Unlock()
	if err != nil {
		return fmt.Errorf("encoding the trace of Recording %s: %w", ar.key, err)
	}
	if len(raw) > maxTraceBytes {
		return actuation.Refuse(actuation.CodeTraceTooLarge, "", "the trace of Recording %s is %d bytes, above the %d cap", ar.key, len(raw), maxTraceBytes).Err()
	}
	digest, size, err := a.d.Blobs.Put(bytes.NewReader(raw), maxTraceBytes)
	if err != nil {
		return fmt.Errorf("storing the trace of Recording %s: %w", ar.key, err)
	}
	name := traceArtifactName(rec.Name)
	art := &wbv1.Artifact{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: rec.Namespace,
		Labels:          nodekit.WithCorrelation(map[string]string{wbv1.NodeLabel: a.d.NodeName, wbv1.EnvironmentLabel: string(rec.Spec.EnvironmentRef)}, rec),
		OwnerReferences: []metav1.OwnerReference{{APIVersion: wbv1.GroupVersion.String(), Kind: "Recording", Name: rec.Name, UID: rec.UID}}},
		Spec: wbv1.ArtifactSpec{EnvironmentRef: rec.Spec.EnvironmentRef, Source: "recording", Classification: "confidential",
			RetentionSeconds: int64(traceRetention / time.Second)}}
	if err := a.d.Client.Create(ctx, art); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating trace Artifact %s/%s: %w", rec.Namespace, name, err)
	}
	if err := a.d.Client.Get(ctx, client.ObjectKeyFromObject(art), art); err != nil {
		if err := a.d.Reader.Get(ctx, client.ObjectKeyFromObject(art), art); err != nil {
			return fmt.Errorf("reading trace Artifact %s/%s: %w", rec.Namespace, name, err)
		}
	}
	acur, anext := nodekit.ArtifactOwned(&art.Status), nodekit.ArtifactOwned(&art.Status)
	until := metav1.NewTime(time.Now().Add(traceRetention))
	anext.Digest, anext.Size, anext.NodeName, anext.RetainedUntil, anext.ObservedGeneration = wbv1.Digest(digest), size, a.d.NodeName, &until, art.Generation
	statusapply.Set(&anext.Conditions, &anext.Conditions, statusapply.Cond(wbv1.ConditionReady, true, "Stored",
		fmt.Sprintf("trace of Recording %s: %d bytes held by node %s", rec.Name, size, a.d.NodeName), art.Generation))
	if _, err := statusapply.Apply(ctx, a.d.Client, nodekit.FieldManager+"artifact", art, acur, anext); err != nil {
		return fmt.Errorf("recording the trace Artifact %s/%s: %w", rec.Namespace, name, err)
	}
	next.TraceDigest, next.TraceArtifactRef = wbv1.Digest(digest), wbv1.ObjectName(name)
	now := metav1.Now()
	next.StopTime = &now
	return nil
}

func traceArtifactName(rec string) string {
	const suffix = "-trace"
	if len(rec) > 253-len(suffix) {
		rec = rec[:253-len(suffix)]
	}
	return rec + suffix
}

// dropRecording forgets a recording and its trace file (after the trace is stored, or when
// the Recording is gone).
func (a *Room) dropRecording(key types.NamespacedName) {
	a.rec.mu.Lock()
	defer a.rec.mu.Unlock()
	for uid, ar := range a.rec.active {
		if ar != nil && ar.key == key {
			delete(a.rec.active, uid)
			_ = os.Remove(ar.file)
		}
	}
}
