package recordings

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/event"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/treehash"
	"sensorium.dev/workbench/internal/skills"
)

// The recorder turns admitted work on an environment with an active Recording into trace
// edges (seed 004). Its hooks sit where work happens: before a command's process or a
// patch's apply starts (the state before), after the outcome (the state after, the
// output), and when a wait is satisfied or a probe answers. States are computed here, on
// the node, from the roots as the data plane sees them (host directory or VM guest).
// Nothing is recorded when no Recording is active for the environment.

// maxPendingEdges bounds the edges started but not yet finished (one per running
// command or applying patch; the node's command cap keeps it far lower).
const maxPendingEdges = 1024

type activeRecording struct {
	key     types.NamespacedName
	uid     string
	env     string // environment name
	session string // only this session's commands and waits ("" = all)
	trace   *skills.Trace
	last    *treehash.State // after the latest edge (nil after a restart)
	file    string
	err     error // a refusal that ended recording (e.g. state-tree-too-large)
	changed bool
}

type pendingEdge struct {
	recs   []*activeRecording
	before *treehash.State
	err    error
}

type recorder struct {
	mu      sync.Mutex
	active  map[string]*activeRecording // recording UID →
	pending map[string]*pendingEdge     // object UID →
	dir     string
	wake    chan event.GenericEvent
	caches  map[string]*treehash.Cache // "<environment UID>/<root>" → incremental state-hash cache
}

// maxStateCaches bounds the incremental state-hash caches (one per recorded root).
const maxStateCaches = 256

// cache returns the state-hash cache of one environment root, creating it (and dropping
// another when maxStateCaches are held: that root is then read in full once).
func (r *recorder) cache(key string) *treehash.Cache {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c := r.caches[key]; c != nil {
		return c
	}
	if r.caches == nil {
		r.caches = map[string]*treehash.Cache{}
	}
	if len(r.caches) >= maxStateCaches {
		for k := range r.caches {
			delete(r.caches, k)
			break
		}
	}
	c := treehash.NewCache(treehash.CeilingMaxEntries)
	r.caches[key] = c
	return c
}

// recordingLimits are the state-hash caps of env (spec.recording; absent fields: defaults).
func recordingLimits(env *wbv1.Environment) treehash.Limits {
	var lim treehash.Limits
	if rl := env.Spec.Recording; rl != nil {
		if rl.MaxEntries != nil {
			lim.MaxEntries = int(*rl.MaxEntries)
		}
		if rl.MaxBytes != nil {
			lim.MaxBytes = *rl.MaxBytes
		}
		if rl.MaxFileBytes != nil {
			lim.MaxFile = *rl.MaxFileBytes
		}
	}
	return lim
}

func newRecorder(stateDir string) *recorder {
	return &recorder{active: map[string]*activeRecording{}, pending: map[string]*pendingEdge{},
		dir: filepath.Join(stateDir, "recordings"), wake: make(chan event.GenericEvent, 64)}
}

// recordingsFor returns the active recordings of environment ns/env that take work of
// session ("" for environment-wide work such as patches).
func (r *recorder) recordingsFor(ns, env, session string) []*activeRecording {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []*activeRecording
	for _, ar := range r.active {
		if ar.key.Namespace == ns && ar.env == env && ar.err == nil && (ar.session == "" || session == "" || ar.session == session) {
			out = append(out, ar)
		}
	}
	return out
}

// workspaceState computes the state of all roots of env as this node sees them.
func (a *Room) workspaceState(ctx context.Context, env *wbv1.Environment) (*treehash.State, error) {
	roots, ok := a.d.MountedRoots(string(env.UID))
	if !ok {
		return nil, fmt.Errorf("environment %s/%s is not mounted on this node", env.Namespace, env.Name)
	}
	lim := recordingLimits(env)
	if err := lim.Check(); err != nil {
		return nil, err
	}
	snaps := make([]treehash.NamedSnapshot, 0, len(roots))
	for _, mr := range roots {
		host, files, err := a.d.OpenRoot(env, mr)
		if err != nil {
			return nil, fmt.Errorf("opening root %s of environment %s/%s: %w", mr.Name, env.Namespace, env.Name, err)
		}
		var s *fsaccess.Snapshot
		if host != nil { // incremental: re-read only what changed since the previous state
			s, err = treehash.SnapshotRoot(host, lim, a.rec.cache(string(env.UID)+"/"+mr.Name))
		} else {
			s, err = files.Snapshot(ctx, "", lim.SnapshotLimits())
		}
		if err != nil {
			return nil, fmt.Errorf("listing root %s of environment %s/%s: %w", mr.Name, env.Namespace, env.Name, err)
		}
		snaps = append(snaps, treehash.NamedSnapshot{Name: mr.Name, Snapshot: s})
	}
	return treehash.FromSnapshots(snaps, lim)
}

// Before is the hook before an effect starts: it computes the state before for the
// active recordings of the environment and keeps it until recordAfter*.
func (a *Room) Before(ctx context.Context, env *wbv1.Environment, session, objUID string) {
	r := a.rec
	recs := r.recordingsFor(env.Namespace, env.Name, session)
	if len(recs) == 0 {
		return
	}
	st, err := a.workspaceState(ctx, env)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.pending) >= maxPendingEdges {
		for k := range r.pending { // drop one: its edge is lost, which the trace's gap shows
			delete(r.pending, k)
			break
		}
	}
	r.pending[objUID] = &pendingEdge{recs: recs, before: st, err: err}
}

func (a *Room) takePending(objUID string) *pendingEdge {
	r := a.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	p := r.pending[objUID]
	delete(r.pending, objUID)
	return p
}

// AfterCommand is the hook after a command's outcome.
func (a *Room) AfterCommand(cmd *wbv1.TerminalCommand, envName string, o CommandOutcome, output []byte) {
	p := a.takePending(string(cmd.UID))
	if p == nil {
		return
	}
	argvDigest, _ := actuation.Digest(cmd.Spec.Argv)
	out, trunc := skills.Bounded(string(output), skills.MaxOutputBytes)
	auth := skills.Authorization{Kind: skills.AuthProfile, Ref: string(cmd.Spec.ProfileRef)}
	if by := cmd.Status.AdmittedBy; by != "" && by != "profile" {
		auth = skills.Authorization{Kind: skills.AuthGrant, Ref: by}
	}
	e := skills.Edge{Kind: skills.EdgeCommand, Object: cmd.Name, CorrelationID: cmd.Labels[wbv1.CorrelationLabel],
		Command: &skills.CommandEdge{Profile: string(cmd.Spec.ProfileRef), Argv: append([]string(nil), cmd.Spec.Argv...), ArgvDigest: argvDigest,
			Cwd: skills.Cwd{Root: string(cmd.Spec.Cwd.Root), Path: string(cmd.Spec.Cwd.Path)}, OutputDigest: o.OutputDigest,
			OutputBytes: o.Bytes, Output: out, OutputTruncated: trunc || o.Truncated},
		Outcome:       skills.Outcome{Phase: string(o.Phase), ExitCode: o.ExitCode, Code: o.RefusalCode},
		Authorization: auth}
	a.finishEdge(cmd.Namespace, envName, p, e)
}

// AfterPatch is the hook after a patch applied.
func (a *Room) AfterPatch(fp *wbv1.FilePatch, env *wbv1.Environment) {
	p := a.takePending(string(fp.UID))
	if p == nil {
		return
	}
	pe := &skills.PatchEdge{Root: string(fp.Spec.Root), Format: string(fp.Spec.Format), Digest: string(fp.Spec.Digest)}
	if fp.Spec.Patch != nil {
		txt, _ := skills.Bounded(*fp.Spec.Patch, skills.MaxPatchBytes)
		pe.Patch, pe.PatchDigest, pe.PatchBytes = txt, fsaccess.DigestBytes([]byte(*fp.Spec.Patch)), int64(len(*fp.Spec.Patch))
	}
	for _, op := range fp.Spec.Operations {
		po := skills.PatchOperation{Op: string(op.Op), Path: string(op.Path)}
		if op.Content != nil {
			c := *op.Content
			po.Content, po.ContentDigest, po.ContentBytes = &c, fsaccess.DigestBytes([]byte(c)), int64(len(c))
		}
		pe.Operations = append(pe.Operations, po)
	}
	// The operator's approval is audited by the API server (an update of spec.approval that
	// the FilePatch webhook allowed only for a subject with the approve verb).
	auth := skills.Authorization{Kind: skills.AuthApproval, Ref: "approved"}
	if env.Spec.PatchApproval != nil && *env.Spec.PatchApproval == wbv1.PatchApprovalAutoApply {
		auth.Ref = "auto-apply:" + env.Name
	}
	a.finishEdge(fp.Namespace, env.Name, p, skills.Edge{Kind: skills.EdgePatch, Object: fp.Name, CorrelationID: fp.Labels[wbv1.CorrelationLabel], Patch: pe,
		Outcome: skills.Outcome{Phase: "Applied"}, Authorization: auth})
}

// Observation is the hook of a satisfied wait or an answered probe: an edge whose
// state before and after is the state now.
func (a *Room) Observation(ctx context.Context, ns, envName, session string, kind skills.EdgeKind, name, condition, result string) {
	if envName == "" || len(a.rec.recordingsFor(ns, envName, session)) == 0 {
		return
	}
	var env wbv1.Environment
	if err := a.d.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: envName}, &env); err != nil {
		return
	}
	uid := "observe/" + ns + "/" + name
	a.Before(ctx, &env, session, uid)
	p := a.takePending(uid)
	if p == nil {
		return
	}
	a.finishEdge(ns, envName, p, skills.Edge{Kind: kind, Object: name, CorrelationID: a.observedCorrelation(ctx, ns, kind, name), Condition: &skills.ConditionEdge{Condition: condition, Result: result},
		Outcome: skills.Outcome{Phase: result}, Authorization: skills.Authorization{Kind: skills.AuthObserve, Ref: name}})
}

// finishEdge computes the state after and appends the edge to each recording.
func (a *Room) finishEdge(ns, envName string, p *pendingEdge, e skills.Edge) {
	ctx := a.d.Ctx
	if ctx == nil {
		ctx = context.Background()
	}
	log := ctrl.LoggerFrom(ctx)
	var env wbv1.Environment
	after, err := (*treehash.State)(nil), p.err
	if err == nil {
		if err = a.d.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: envName}, &env); err == nil {
			if e.Kind == skills.EdgeWait || e.Kind == skills.EdgeProbe {
				after = p.before
			} else {
				after, err = a.workspaceState(ctx, &env)
			}
		}
	}
	e.Backend, e.RecordedAt = string(env.Spec.Backend), time.Now().UTC()
	r := a.rec
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, ar := range p.recs {
		if r.active[ar.uid] != ar || ar.err != nil {
			continue // stopped meanwhile
		}
		if err != nil {
			ar.err, ar.changed = err, true
			log.Error(err, "Recording stopped: the workspace state could not be computed", "recording", ar.key)
			continue
		}
		edge := e
		edge.StateBefore, edge.StateAfter = p.before.Digest, after.Digest
		ch, cerr := skills.Changes(skills.StateEntries(p.before), skills.StateEntries(after))
		if cerr != nil {
			ar.err, ar.changed = cerr, true
			continue
		}
		edge.Changes = ch
		if ar.last != nil && ar.last.Digest != p.before.Digest {
			gap, _ := skills.Changes(skills.StateEntries(ar.last), skills.StateEntries(p.before))
			edge.OutOfBand = gap
		}
		if aerr := ar.trace.AppendEdge(edge); aerr != nil {
			ar.err, ar.changed = aerr, true
			continue
		}
		ar.last, ar.changed = after, true
		if werr := ar.save(); werr != nil {
			log.Error(werr, "Saving the recording's trace", "recording", ar.key)
		}
		select {
		case r.wake <- event.GenericEvent{Object: &wbv1.Recording{ObjectMeta: objectMeta(ar.key)}}:
		default: // the reconciler is already queued for a wake
		}
	}
}

func (ar *activeRecording) save() error {
	raw, err := json.Marshal(ar.trace)
	if err != nil {
		return err
	}
	tmp := ar.file + ".tmp"
	if err := os.WriteFile(tmp, raw, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, ar.file)
}
