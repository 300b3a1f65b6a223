package agent

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

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/convert"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/statusapply"
)

// liveSession is a session this process serves: always an event ring; a PTY program too
// when the session names a shell profile.
type liveSession struct {
	envUID  string
	ring    *ring.Ring
	pty     *session.Session
	started time.Time
	closed  bool
	// release gives the session's slot of the session shares back (once; shares.go).
	release func()
}

// sessionOpen says whether the session is open in this process.
func (a *Agent) sessionOpen(uid string) bool { return a.sess.open(uid) != nil }

// sessionRing returns the event ring of an open session.
func (a *Agent) sessionRing(uid string) *ring.Ring {
	if s := a.sess.open(uid); s != nil {
		return s.ring
	}
	return nil
}

type sessionReconciler struct{ a *Agent }

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
	defer a.kickCapacity() // what this pass opened or ended changes the free capacity (free.go)
	// Open attach streams re-check the session's raw input after this pass (dataplane.go).
	defer a.sessChanged.notify()
	var ts wbv1.TerminalSession
	if err := a.client.Get(ctx, req.NamespacedName, &ts); err != nil {
		if client.IgnoreNotFound(err) == nil {
			a.closeSessionByName(ctx, req.Namespace, req.Name)
			return ctrl.Result{}, nil
		}
		return ctrl.Result{}, err
	}
	if ts.Labels[wbv1.NodeLabel] != a.cfg.NodeName || wbv1.SessionPhaseIsFinal(ts.Status.Phase) {
		return ctrl.Result{}, nil
	}
	deleting := !ts.DeletionTimestamp.IsZero()
	cur, next := sessionOwned(&ts.Status), sessionOwned(&ts.Status)
	uid := string(ts.UID)
	live, _ := a.sess.get(uid)
	result := ctrl.Result{}
	opened := false
	next.NodeName = a.cfg.NodeName
	set := func(t string, ok bool, reason, msg string) {
		statusapply.Set(&next.Conditions, &next.Conditions, statusapply.Cond(t, ok, reason, msg, ts.Generation))
	}
	fail := func(code, msg string) {
		next.Phase, next.Refusal = wbv1.SessionFailed, &wbv1.Refusal{Code: code, Message: statusapply.Truncate(msg, 1024)}
		set(wbv1.ConditionReady, false, wbv1.ReasonFailed, code+": "+msg)
	}
	switch {
	case a.cordoned.Load() && !deleting && ts.Spec.DesiredState != "Closed":
		// kubectl drain (node_drain.go): an open session ends interrupted, a new one is refused.
		if live != nil {
			a.closeSession(ctx, uid, false)
			fail(string(actuation.CodeInterrupted), "node "+a.cfg.NodeName+" was drained (cordoned) while the session was open")
		} else {
			fail(string(actuation.CodeNodeDraining), "node "+a.cfg.NodeName+" is cordoned (kubectl drain); create the session again after kubectl uncordon")
		}
	case live == nil:
		rec, ok, err := a.store.Sessions().Get(uid)
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
		res, code, msg, err := a.openSession(ctx, &ts)
		if err != nil {
			return ctrl.Result{}, err
		}
		if code != "" {
			fail(code, msg)
			break
		}
		if !a.sessionOpen(uid) {
			next.Phase = wbv1.SessionStarting
			result = res
			break
		}
		opened = true
		next.Phase = wbv1.SessionRunning
		set(wbv1.ConditionReady, true, "Running", "session open on node "+a.cfg.NodeName)
		result.RequeueAfter = 30 * time.Second
	default:
		next.LastSeq = int64(live.ring.LastSeq())
		expired := time.Since(live.started) > time.Duration(ts.Spec.MaxDurationSeconds)*time.Second
		if ts.Spec.DesiredState == "Closed" || deleting || expired || (live.pty != nil && live.pty.Phase().Terminal()) {
			phase := a.closeSession(ctx, uid, expired)
			next.Phase = phase
			remaining := int32(0)
			if live.pty != nil && !live.pty.CleanupComplete() {
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
		if live.pty == nil {
			// Level-based: a structured session that is open is Running, whatever an
			// earlier pass managed to write.
			next.Phase = wbv1.SessionRunning
			set(wbv1.ConditionReady, true, "Running", "session open on node "+a.cfg.NodeName)
		} else {
			// The digest of a screen somebody asked for (status never builds the model: an
			// idle session stays small), in the API's sha256:<hex> form.
			if live.pty.ScreenBuilt() {
				next.ScreenDigest = wbv1.Digest("sha256:" + live.pty.Screen().Digest)
			}
			switch live.pty.Phase() {
			case session.PhaseIdle:
				next.Phase = wbv1.SessionIdle
			default:
				next.Phase = wbv1.SessionRunning
			}
		}
		left := time.Duration(ts.Spec.MaxDurationSeconds)*time.Second - time.Since(live.started)
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
	wrote, err := statusapply.Apply(ctx, a.client, FieldManager+"session", &ts, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if opened {
		a.sessionAvailable(ctx, &ts)
	}
	if wrote && cur.Phase != next.Phase {
		a.recordEvent(&ts, corev1.EventTypeNormal, string(next.Phase), "Session is "+string(next.Phase))
	}
	return result, nil
}

// openSession opens the ring (and the PTY program of a shell profile) once the environment
// is ready. It returns a refusal code when the session cannot open.
func (a *Agent) openSession(ctx context.Context, ts *wbv1.TerminalSession) (ctrl.Result, string, string, error) {
	var env wbv1.Environment
	if err := a.client.Get(ctx, types.NamespacedName{Namespace: ts.Namespace, Name: string(ts.Spec.EnvironmentRef)}, &env); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, "", "", err
		}
		// Not in this node's cache: the environment's own watch event may simply not have
		// arrived yet (the session's came first). Ask the API server once: bound to this node,
		// its event wakes the session (sessionsOfEnvironment); otherwise it is not this node's.
		if err := a.reader.Get(ctx, types.NamespacedName{Namespace: ts.Namespace, Name: string(ts.Spec.EnvironmentRef)}, &env); client.IgnoreNotFound(err) != nil {
			return ctrl.Result{}, "", "", err
		} else if err == nil && env.Labels[wbv1.NodeLabel] == a.cfg.NodeName && env.DeletionTimestamp.IsZero() {
			return ctrl.Result{}, "", "", nil
		}
		return ctrl.Result{}, string(actuation.CodeEnvironmentUnavailable), "environment not on this node", nil
	}
	if code, msg := pausedRefusal(&env); code != "" { // environment_pause.go
		return ctrl.Result{}, code, msg, nil
	}
	roots, ready := a.mountedRoots(string(env.UID))
	if !ready {
		// environmentAvailable wakes the session once the environment is mounted here.
		return ctrl.Result{}, "", "", nil
	}
	open, perEnvs := a.sess.openCounts()
	perEnv := perEnvs[string(env.UID)]
	if open >= a.cfg.Caps.Sessions || perEnv >= a.cfg.Caps.SessionsPerEnvironment {
		return ctrl.Result{}, string(actuation.CodeSessionCapReached), fmt.Sprintf("node has %d open sessions (cap %d), environment %d (cap %d)",
			open, a.cfg.Caps.Sessions, perEnv, a.cfg.Caps.SessionsPerEnvironment), nil
	}
	// The creator's share of the node's session slots (shares.go): taken here, held while
	// the session is open (sessionRegistry.markClosed/remove give it back).
	release, code, msg := a.acquireShare(ctx, a.shares.sessions, sessionCapName, actuation.CodeSessionCapReached, ts.Namespace, ts.Spec.CreatedBy)
	if code != "" {
		return ctrl.Result{}, code, msg, nil
	}
	placed := false
	defer func() {
		if !placed {
			release()
		}
	}()
	live := &liveSession{envUID: string(env.UID), started: time.Now(), release: release}
	rec := store.Session{UID: string(ts.UID), Namespace: ts.Namespace, Name: ts.Name, EnvironmentUID: string(env.UID), Phase: string(wbv1.SessionStarting), UpdatedAt: time.Now()}
	if ts.Spec.ShellProfileRef != nil {
		var prof wbv1.CommandProfile
		if err := a.reader.Get(ctx, types.NamespacedName{Namespace: ts.Namespace, Name: string(*ts.Spec.ShellProfileRef)}, &prof); err != nil {
			if client.IgnoreNotFound(err) == nil {
				return ctrl.Result{}, string(actuation.CodeProfileMissing), "shell profile does not exist", nil
			}
			return ctrl.Result{}, "", "", err
		}
		core := convert.Profile(&prof.Spec)
		if core.PTY != "Allowed" {
			return ctrl.Result{}, string(actuation.CodeProfileInvalid), "profile " + prof.Name + " does not allow a PTY", nil
		}
		if env.Spec.Backend == wbv1.BackendFixtureCopy {
			return ctrl.Result{}, string(actuation.CodeCapabilityMismatch), "fixture-copy.v1 is a managed copy, not a process sandbox: no PTY", nil
		}
		envVars, ref := actuation.CuratedEnv(core, nil)
		if ref != nil {
			return ctrl.Result{}, string(ref.Code), ref.Message, nil
		}
		resolved := resolveExecutable(core.Executable)
		envVars = gitPinnedEnv(core.Executable, resolved, envVars)
		dir, guestDir := "", ""
		var writable, readable []string // the profile's allowed roots: all the program sees of the host
		for _, r := range roots {
			if len(core.AllowedRoots) > 0 && r.Name == core.AllowedRoots[0] {
				dir, guestDir = r.Path, r.GuestDir
			}
			if r.Path != "" && slices.Contains(core.AllowedRoots, r.Name) {
				if r.ReadOnly {
					readable = append(readable, r.Path)
				} else {
					writable = append(writable, r.Path)
				}
			}
		}
		if dir == "" && guestDir == "" {
			return ctrl.Result{}, string(actuation.CodeRootNotAllowed), "no root of the environment is allowed by the profile", nil
		}
		if err := a.verifyRoots(string(env.UID), roots); err != nil {
			return ctrl.Result{}, codeOf(err), err.Error(), nil
		}
		kv := make([]string, 0, len(envVars))
		for _, e := range envVars {
			kv = append(kv, e.Name+"="+e.Value)
		}
		argv := append([]string{core.Executable}, core.FixedArgs...)
		if guestDir == "" {
			if ref := actuation.CheckResolvedExecutable(core, resolved, argv); ref != nil {
				return ctrl.Result{}, string(ref.Code), ref.Message, nil
			}
		}
		if guestDir != "" {
			// The program runs in the VM guest; the host session runs the relay to it.
			var code, msg string
			if argv, kv, dir, code, msg = a.guestRelay(&env, ts, argv, kv, guestDir); code != "" {
				return ctrl.Result{}, code, msg, nil
			}
		}
		if err := a.store.Sessions().Put(rec); err != nil {
			return ctrl.Result{}, "", "", err
		}
		s, err := a.sessions.Open(context.Background(), session.Spec{
			ID: string(ts.UID), EnvironmentID: string(env.UID), Argv: argv, Env: kv,
			Dir: filepath.Clean(dir), Rows: uint16(ts.Spec.Rows), Cols: uint16(ts.Spec.Cols),
			WritableRoots: writable, ReadableRoots: readable, HostRelay: guestDir != "",
			GitMetadataWritable: core.GitMetadataWritable(),
			IdleTimeout:         time.Duration(ts.Spec.IdleTimeoutSeconds) * time.Second, MaxDuration: time.Duration(ts.Spec.MaxDurationSeconds) * time.Second,
			Resources: environmentLimits(&env), FileSizeLimit: a.fileSizeLimit(&env),
		})
		if err != nil {
			_ = a.store.Sessions().Delete(rec.UID)
			code := string(actuation.CodeOf(err))
			if code == "" {
				code = string(actuation.CodeSessionOpenFailed)
			}
			return ctrl.Result{}, code, err.Error(), nil
		}
		info := s.Info()
		rec.PID, rec.PGID, rec.StartTime = info.Pid, info.Pgid, info.StartTime
		live.pty, live.ring = s, s.Events()
		obj := ts.DeepCopy()
		go func() {
			<-s.Done()
			a.wake(a.wakeSessions, obj)
		}()
	} else {
		rg, err := ring.New(ring.Config{MaxEvents: a.cfg.Caps.EventBufferDepth})
		if err != nil {
			return ctrl.Result{}, string(actuation.CodeOf(err)), err.Error(), nil
		}
		live.ring = rg
	}
	rec.Phase = string(wbv1.SessionRunning)
	if err := a.store.Sessions().Put(rec); err != nil {
		return ctrl.Result{}, "", "", err
	}
	a.sess.put(string(ts.UID), live)
	placed = true
	return ctrl.Result{}, "", "", nil
}

// closeSession closes a live session idempotently and returns its final phase.
func (a *Agent) closeSession(ctx context.Context, uid string, expired bool) wbv1.SessionPhase {
	live := a.sess.markClosed(uid)
	phase := wbv1.SessionClosed
	if expired {
		phase = wbv1.SessionExpired
	}
	if live != nil && live.pty != nil {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_ = live.pty.Close(cctx)
		cancel()
		if e := live.pty.Exit(); e.Origin == "expired" {
			phase = wbv1.SessionExpired
		} else if e.Origin == "killed" {
			phase = wbv1.SessionKilled
		}
	}
	if rec, ok, _ := a.store.Sessions().Get(uid); ok {
		rec.Phase, rec.UpdatedAt = string(phase), time.Now()
		_ = a.store.Sessions().Put(rec)
	}
	return phase
}

func (a *Agent) closeSessionByName(ctx context.Context, ns, name string) {
	recs, _ := a.store.Sessions().List(0)
	for _, r := range recs {
		if r.Namespace == ns && r.Name == name {
			a.closeSession(ctx, r.UID, false)
			_ = a.store.Sessions().Delete(r.UID)
			a.sess.remove(r.UID)
		}
	}
}

var _ = metav1.Now
