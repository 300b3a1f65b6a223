// Package sessions is the node agent's room for TerminalSessions: it opens a session's
// event ring (and the PTY program of a shell profile) once its environment is mounted on
// this node, reports its phase, and closes it. It holds the registry of the sessions this
// process serves, which the agent's other parts read. It imports nothing of the agent.
package sessions

import (
	"context"
	"fmt"
	"path/filepath"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/convert"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/statusapply"
)

// Caps are the node's session bounds.
type Caps struct {
	Sessions, SessionsPerEnvironment int
	// EventBufferDepth bounds the event ring of a structured session.
	EventBufferDepth int
}

// Deps is what the session room needs of the node agent.
type Deps struct {
	// Ctx is the agent's run context (a wake gives up when it ends).
	Ctx      context.Context
	NodeName string
	Client   client.Client // the node's cache
	Reader   client.Reader // the API server, uncached
	Store    *store.DB
	Live     *Registry        // the sessions this process serves
	PTYs     *session.Manager // opens the PTY programs
	Caps     Caps
	// Cordoned says the node is cordoned (kubectl drain): open sessions end interrupted.
	Cordoned func() bool
	// Paused is the refusal of new work on an environment asked to pause ("" for none).
	Paused func(env *wbv1.Environment) (code, msg string)
	// MountedRoots are the roots of an environment mounted in this process (false: not ready).
	MountedRoots func(envUID string) ([]backends.MountedRoot, bool)
	// VerifyRoots checks the environment's pinned roots are the directories it mounted.
	VerifyRoots func(envUID string, roots []backends.MountedRoot) error
	// AcquireShare takes the creator's slot of the node's session shares.
	AcquireShare func(ctx context.Context, ns, creator string) (release func(), code, msg string)
	// Executor is the environment's executor (backends.Env.Exec): it translates the PTY
	// program into the host program the session manager runs (the program itself, or the
	// relay to a guest that runs it).
	Executor func(env *wbv1.Environment) (backends.Executor, error)
	// Relay is the node agent's own executable (the relay of a guest terminal).
	Relay string
	// Limits and FileSizeLimit are the environment's cgroup limits and RLIMIT_FSIZE.
	Limits        func(env *wbv1.Environment) cgroups.Limits
	FileSizeLimit func(env *wbv1.Environment) int64
	// Available wakes what waits for a session opened by this pass.
	Available func(ctx context.Context, ts *wbv1.TerminalSession)
	// Changed wakes open attach streams to re-check their session.
	Changed func()
	// Kick says the node's free capacity may have changed.
	Kick  func()
	Event nodekit.EventFunc
	// Wake re-queues a session (its PTY program ended).
	Wake chan event.GenericEvent
}

// Room is the session room.
type Room struct{ d Deps }

// Setup registers the TerminalSession reconciler, filtered to this node by the cache,
// woken by the room's channel and by its environment (ofEnvironment).
func Setup(mgr ctrl.Manager, d Deps, ofEnvironment handler.MapFunc) error {
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.TerminalSession{}).Named("node-session").WithOptions(nodekit.RetryOptions()).
		WatchesRawSource(source.Channel(d.Wake, &handler.EnqueueRequestForObject{})).
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(ofEnvironment)).
		Complete(&sessionReconciler{a: &Room{d: d}}); err != nil {
		return fmt.Errorf("session controller: %w", err)
	}
	return nil
}

type sessionReconciler struct{ a *Room }

func sessionOwned(s *wbv1.TerminalSessionStatus) wbv1.TerminalSessionStatus {
	return wbv1.TerminalSessionStatus{
		Phase: s.Phase, NodeName: s.NodeName, LastSeq: s.LastSeq, ScreenDigest: s.ScreenDigest, Cleanup: s.Cleanup, Refusal: s.Refusal,
		ObservedGeneration: s.ObservedGeneration,
		Conditions: statusapply.Owned(s.Conditions, wbv1.ConditionReady, wbv1.ConditionCleanupComplete,
			wbv1.ConditionReconciling, wbv1.ConditionStalled),
	}
}

func (r *sessionReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := r.a
	defer a.d.Kick() // what this pass opened or ended changes the free capacity
	// Open attach streams re-check the session's raw input after this pass.
	defer a.d.Changed()
	var ts wbv1.TerminalSession
	if err := a.d.Client.Get(ctx, req.NamespacedName, &ts); err != nil {
		if client.IgnoreNotFound(err) == nil {
			a.closeByName(ctx, req.Namespace, req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if ts.Labels[wbv1.NodeLabel] != a.d.NodeName || wbv1.SessionPhaseIsFinal(ts.Status.Phase) {
		return ctrl.Result{}, nil
	}
	deleting := !ts.DeletionTimestamp.IsZero()
	cur, next := sessionOwned(&ts.Status), sessionOwned(&ts.Status)
	uid := string(ts.UID)
	live, _ := a.d.Live.Get(uid)
	result := ctrl.Result{}
	opened := false
	next.NodeName = a.d.NodeName
	set := func(t string, ok bool, reason, msg string) {
		statusapply.Set(&next.Conditions, &next.Conditions, statusapply.Cond(t, ok, reason, msg, ts.Generation))
	}
	fail := func(code, msg string) {
		next.Phase, next.Refusal = wbv1.SessionFailed, &wbv1.Refusal{Code: code, Message: statusapply.Truncate(msg, 1024)}
		set(wbv1.ConditionReady, false, wbv1.ReasonFailed, code+": "+msg)
	}
	switch {
	case a.d.Cordoned() && !deleting && ts.Spec.DesiredState != "Closed":
		// kubectl drain (node_drain.go): an open session ends interrupted, a new one is refused.
		if live != nil {
			Close(ctx, a.d.Live, a.d.Store, uid, false)
			fail(string(actuation.CodeInterrupted), "node "+a.d.NodeName+" was drained (cordoned) while the session was open")
		} else {
			fail(string(actuation.CodeNodeDraining), "node "+a.d.NodeName+" is cordoned (kubectl drain); create the session again after kubectl uncordon")
		}
	case live == nil:
		rec, ok, err := a.d.Store.Sessions().Get(uid)
		if err != nil {
			return ctrl.Result{}, fmt.Errorf("reading the store record of session %s/%s: %w", ts.Namespace, ts.Name, err)
		}
		if ok {
			// Opened by a previous agent process: its PTY and processes are gone (the
			// recovery sweep killed them); the session ends Failed, never silently reopened.
			fail(string(actuation.CodeInterrupted), "the node agent restarted; "+rec.Reason)
			break
		}
		if ts.Spec.DesiredState == "Closed" || deleting {
			next.Phase = wbv1.SessionClosed
			set(wbv1.ConditionCleanupComplete, true, "NeverOpened", "the session was closed before it opened")
			break
		}
		res, code, msg, err := a.open(ctx, &ts)
		if err != nil {
			return ctrl.Result{}, err
		}
		if code != "" {
			fail(code, msg)
			break
		}
		if a.d.Live.Open(uid) == nil {
			next.Phase = wbv1.SessionStarting
			result = res
			break
		}
		opened = true
		next.Phase = wbv1.SessionRunning
		set(wbv1.ConditionReady, true, "Running", "session open on node "+a.d.NodeName)
		result.RequeueAfter = 30 * time.Second
	default:
		next.LastSeq = int64(live.Ring.LastSeq())
		expired := time.Since(live.Started) > time.Duration(ts.Spec.MaxDurationSeconds)*time.Second
		if ts.Spec.DesiredState == "Closed" || deleting || expired || (live.PTY != nil && live.PTY.Phase().Terminal()) {
			phase := Close(ctx, a.d.Live, a.d.Store, uid, expired)
			next.Phase = phase
			remaining := int32(0)
			if live.PTY != nil && !live.PTY.CleanupComplete() {
				remaining = 1
			}
			next.Cleanup = &wbv1.SessionCleanup{RemainingProcesses: remaining}
			set(wbv1.ConditionCleanupComplete, remaining == 0, "Closed", "session closed")
			set(wbv1.ConditionReady, false, string(phase), "session "+string(phase))
			if remaining > 0 {
				result.RequeueAfter = 2 * time.Second
			}
			break
		}
		if live.PTY == nil {
			// Level-based: a structured session that is open is Running, whatever an
			// earlier pass managed to write.
			next.Phase = wbv1.SessionRunning
			set(wbv1.ConditionReady, true, "Running", "session open on node "+a.d.NodeName)
		} else {
			// The digest of a screen somebody asked for (status never builds the model: an
			// idle session stays small), in the API's sha256:<hex> form.
			if live.PTY.ScreenBuilt() {
				next.ScreenDigest = wbv1.Digest("sha256:" + live.PTY.Screen().Digest)
			}
			switch live.PTY.Phase() {
			case session.PhaseIdle:
				next.Phase = wbv1.SessionIdle
			default:
				next.Phase = wbv1.SessionRunning
			}
		}
		left := time.Duration(ts.Spec.MaxDurationSeconds)*time.Second - time.Since(live.Started)
		result.RequeueAfter = min(30*time.Second, max(left, time.Second))
	}
	closeRequested := ts.Spec.DesiredState == "Closed" || deleting
	if next.Phase == wbv1.SessionClosed && closeRequested {
		// Closed as asked: the session has no readiness left to report (kstatus Current).
		next.Conditions = slices.DeleteFunc(next.Conditions, func(c metav1.Condition) bool { return c.Type == wbv1.ConditionReady })
	}
	for _, hc := range wbv1.HealthConditions(wbv1.SessionHealth(next.Phase, closeRequested), string(next.Phase), "session is "+string(next.Phase), ts.Generation) {
		statusapply.Set(&next.Conditions, &next.Conditions, hc)
	}
	next.ObservedGeneration = ts.Generation
	wrote, err := statusapply.Apply(ctx, a.d.Client, nodekit.FieldManager+"session", &ts, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if opened {
		a.d.Available(ctx, &ts)
	}
	if wrote && cur.Phase != next.Phase {
		a.d.Event(&ts, corev1.EventTypeNormal, string(next.Phase), "Session is "+string(next.Phase))
	}
	return result, nil
}

// open opens the ring (and the PTY program of a shell profile) once the environment
// is ready. It returns a refusal code when the session cannot open.
func (a *Room) open(ctx context.Context, ts *wbv1.TerminalSession) (ctrl.Result, string, string, error) {
	var env wbv1.Environment
	if err := a.d.Client.Get(ctx, types.NamespacedName{Namespace: ts.Namespace, Name: string(ts.Spec.EnvironmentRef)}, &env); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, "", "", err
		}
		// Not in this node's cache: the environment's own watch event may simply not have
		// arrived yet (the session's came first). Ask the API server once: bound to this node,
		// its event wakes the session (sessionsOfEnvironment); otherwise it is not this node's.
		if err := a.d.Reader.Get(ctx, types.NamespacedName{Namespace: ts.Namespace, Name: string(ts.Spec.EnvironmentRef)}, &env); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, "", "", err
		} else if err == nil && env.Labels[wbv1.NodeLabel] == a.d.NodeName && env.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, "", "", nil
		}
		return ctrl.Result{}, string(actuation.CodeEnvironmentUnavailable), "environment not on this node", nil
	}
	if code, msg := a.d.Paused(&env); code != "" {
		return ctrl.Result{}, code, msg, nil
	}
	roots, ready := a.d.MountedRoots(string(env.UID))
	if !ready {
		// environmentAvailable wakes the session once the environment is mounted here.
		return ctrl.Result{}, "", "", nil
	}
	open, perEnvs := a.d.Live.OpenCounts()
	perEnv := perEnvs[string(env.UID)]
	if open >= a.d.Caps.Sessions || perEnv >= a.d.Caps.SessionsPerEnvironment {
		return ctrl.Result{}, string(actuation.CodeSessionCapReached), fmt.Sprintf("node has %d open sessions (cap %d), environment %d (cap %d)",
			open, a.d.Caps.Sessions, perEnv, a.d.Caps.SessionsPerEnvironment), nil
	}
	// The creator's share of the node's session slots: taken here, held while the session
	// is open (Registry.MarkClosed/Remove give it back).
	release, code, msg := a.d.AcquireShare(ctx, ts.Namespace, ts.Spec.CreatedBy)
	if code != "" {
		return ctrl.Result{}, code, msg, nil
	}
	placed := false
	defer func() {
		if !placed {
			release()
		}
	}()
	live := &Live{EnvUID: string(env.UID), Started: time.Now(), release: release}
	rec := store.Session{UID: string(ts.UID), Namespace: ts.Namespace, Name: ts.Name, EnvironmentUID: string(env.UID), Phase: string(wbv1.SessionStarting), UpdatedAt: time.Now()}
	if ts.Spec.ShellProfileRef != nil {
		var prof wbv1.CommandProfile
		if err := a.d.Reader.Get(ctx, types.NamespacedName{Namespace: ts.Namespace, Name: string(*ts.Spec.ShellProfileRef)}, &prof); err != nil {
			if client.IgnoreNotFound(err) == nil {
				return ctrl.Result{}, string(actuation.CodeProfileMissing), "shell profile does not exist", nil
			}
			return ctrl.Result{}, "", "", err
		}
		core := convert.Profile(&prof.Spec)
		if core.PTY != "Allowed" {
			return ctrl.Result{}, string(actuation.CodeProfileInvalid), "profile " + prof.Name + " does not allow a PTY", nil
		}
		envVars, ref := actuation.CuratedEnv(core, nil)
		if ref != nil {
			return ctrl.Result{}, string(ref.Code), ref.Message, nil
		}
		resolved := nodekit.ResolveExecutable(core.Executable)
		envVars = nodekit.GitPinnedEnv(core.Executable, resolved, envVars)
		ex, err := a.d.Executor(&env)
		if err != nil {
			return ctrl.Result{}, string(actuation.CodeOf(err)), err.Error(), nil
		}
		if err := a.d.VerifyRoots(string(env.UID), roots); err != nil {
			return ctrl.Result{}, string(actuation.CodeOf(err)), err.Error(), nil
		}
		kv := make([]string, 0, len(envVars))
		for _, e := range envVars {
			kv = append(kv, e.Name+"="+e.Value)
		}
		// The executor says what the host runs — the program beneath its root, or the relay
		// to the guest that runs it — or refuses: what its backend cannot run (fixture-copy.v1:
		// no PTY), a profile that allows no root of the environment (root-not-allowed).
		term, ref := ex.Terminal(backends.TerminalRequest{Profile: core, Roots: roots, SessionID: "s-" + string(ts.UID),
			Argv: append([]string{core.Executable}, core.FixedArgs...), Env: kv, Relay: a.d.Relay})
		if ref != nil {
			return ctrl.Result{}, string(ref.Code), ref.Message, nil
		}
		if err := a.d.Store.Sessions().Put(rec); err != nil {
			return ctrl.Result{}, "", "", err
		}
		s, err := a.d.PTYs.Open(context.Background(), session.Spec{
			ID: string(ts.UID), EnvironmentID: string(env.UID), Argv: term.Argv, Env: term.Env,
			Dir: filepath.Clean(term.Dir), Rows: uint16(ts.Spec.Rows), Cols: uint16(ts.Spec.Cols),
			WritableRoots: term.WritableRoots, ReadableRoots: term.ReadableRoots, HostRelay: term.HostRelay,
			GitMetadataWritable: core.GitMetadataWritable(),
			IdleTimeout:         time.Duration(ts.Spec.IdleTimeoutSeconds) * time.Second, MaxDuration: time.Duration(ts.Spec.MaxDurationSeconds) * time.Second,
			Resources: a.d.Limits(&env), FileSizeLimit: a.d.FileSizeLimit(&env),
		})
		if err != nil {
			_ = a.d.Store.Sessions().Delete(rec.UID)
			code := string(actuation.CodeOf(err))
			if code == "" {
				code = string(actuation.CodeSessionOpenFailed)
			}
			return ctrl.Result{}, code, err.Error(), nil
		}
		info := s.Info()
		rec.PID, rec.PGID, rec.StartTime = info.Pid, info.Pgid, info.StartTime
		live.PTY, live.Ring = s, s.Events()
		obj := ts.DeepCopy()
		go func() {
			<-s.Done()
			nodekit.Wake(a.d.Ctx, a.d.Wake, obj)
		}()
	} else {
		rg, err := ring.New(ring.Config{MaxEvents: a.d.Caps.EventBufferDepth})
		if err != nil {
			return ctrl.Result{}, string(actuation.CodeOf(err)), err.Error(), nil
		}
		live.Ring = rg
	}
	rec.Phase = string(wbv1.SessionRunning)
	if err := a.d.Store.Sessions().Put(rec); err != nil {
		return ctrl.Result{}, "", "", err
	}
	a.d.Live.Put(string(ts.UID), live)
	placed = true
	return ctrl.Result{}, "", "", nil
}

// Close closes a live session of reg idempotently, records its final phase in st and
// returns it.
func Close(ctx context.Context, reg *Registry, st *store.DB, uid string, expired bool) wbv1.SessionPhase {
	live := reg.MarkClosed(uid)
	phase := wbv1.SessionClosed
	if expired {
		phase = wbv1.SessionExpired
	}
	if live != nil && live.PTY != nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = live.PTY.Close(cctx)
		cancel()
		if e := live.PTY.Exit(); e.Origin == "expired" {
			phase = wbv1.SessionExpired
		} else if e.Origin == "killed" {
			phase = wbv1.SessionKilled
		}
	}
	if rec, ok, _ := st.Sessions().Get(uid); ok {
		rec.Phase, rec.UpdatedAt = string(phase), time.Now()
		_ = st.Sessions().Put(rec)
	}
	return phase
}

func (a *Room) closeByName(ctx context.Context, ns, name string) {
	recs, _ := a.d.Store.Sessions().List(0)
	for _, r := range recs {
		if r.Namespace == ns && r.Name == name {
			Close(ctx, a.d.Live, a.d.Store, r.UID, false)
			_ = a.d.Store.Sessions().Delete(r.UID)
			a.d.Live.Remove(r.UID)
		}
	}
}
