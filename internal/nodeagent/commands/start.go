package commands

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/convert"
	"sensorium.dev/workbench/internal/nodeagent/environments"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/runs"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/platform/spans"
)

// target is what a command runs against on this node: its session (open here, with its
// event ring) and its environment (ready here, with its mounted roots).
type target struct {
	sess  wbv1.TerminalSession
	env   wbv1.Environment
	roots []backends.MountedRoot
	live  *ring.Ring
}

// placed resolves the command's session and environment on this node; nil (and no error)
// when the pass stops here: refused (p.refuse), or waiting for the session or the
// environment to be bound, opened or mounted here (their events wake the command).
func (r *Room) placed(ctx context.Context, p *cmdPass) (*target, error) {
	cmd := p.cmd
	t := &target{}
	sess, env := &t.sess, &t.env
	key := types.NamespacedName{Namespace: cmd.Namespace, Name: string(cmd.Spec.SessionRef)}
	if err := r.d.Client.Get(ctx, key, sess); err != nil {
		if client.IgnoreNotFound(err) != nil {
			return nil, err
		}
		// Not in this node's cache: either not bound to the node yet (the manager binds
		// sessions and commands independently) or gone. Ask the API server once.
		if err := r.d.Reader.Get(ctx, key, sess); client.IgnoreNotFound(err) != nil {
			return nil, err
		} else if err != nil {
			p.refuse(string(actuation.CodeSessionMissing), "session "+key.Name+" does not exist")
			return nil, nil
		}
		if l := sess.Labels[wbv1.NodeLabel]; l != "" && l != r.d.NodeName {
			p.refuse(string(actuation.CodeSessionMissing), "session "+key.Name+" is bound to node "+l)
			return nil, nil
		}
		return nil, nil // binding the session to this node brings it into the cache: its event wakes the command
	}
	if wbv1.SessionPhaseIsFinal(sess.Status.Phase) {
		p.refuse(string(actuation.CodeSessionClosed), "session "+sess.Name+" is "+string(sess.Status.Phase))
		return nil, nil
	}
	if ref, err := r.d.SessionEmitter(ctx, cmd, sess); err != nil { // internal/nodeagent/sessions/emitter.go
		return nil, err
	} else if ref != nil {
		p.refuse(string(ref.Code), ref.Message)
		return nil, nil
	}
	if err := r.d.Client.Get(ctx, types.NamespacedName{Namespace: cmd.Namespace, Name: string(sess.Spec.EnvironmentRef)}, env); err != nil {
		return nil, client.IgnoreNotFound(err)
	}
	if env.Status.NodeName != r.d.NodeName {
		return nil, nil // not ours (yet); the label said so, the status does not agree
	}
	if code, msg := environments.PausedRefusal(env); code != "" { // internal/nodeagent/environments/pause.go
		p.refuse(code, msg)
		return nil, nil
	}
	var ready bool
	t.roots, ready = r.d.Roots(string(env.UID))
	if !ready {
		return nil, nil // environmentAvailable wakes the command once the environment is mounted here
	}
	if t.live = r.d.SessionRing(string(sess.UID)); t.live == nil {
		return nil, nil // sessionAvailable wakes the command once the session is open here
	}
	return t, nil
}

// effectiveProfile is the command's profile (nil and no error: refused, it is gone), and
// whether it came from the node's memo (then the claim reads it again: claimCurrent).
func (r *Room) effectiveProfile(ctx context.Context, p *cmdPass) (prof *wbv1.CommandProfile, memo bool, err error) {
	cmd := p.cmd
	// The effective profile: on a fast pass not yet claimed, the node's memo of its last read
	// (profile_memo.go) when it is recent — then the claim re-reads it from the API server and
	// nothing starts unless that read is the version admitted against (claimCurrent);
	// otherwise read from the API server now.
	pkey := types.NamespacedName{Namespace: cmd.Namespace, Name: string(cmd.Spec.ProfileRef)}
	if p.fast && !p.claimed {
		prof = r.profiles.get(pkey, time.Now())
	}
	if prof != nil {
		return prof, true, nil
	}
	prof = &wbv1.CommandProfile{}
	if err := r.d.Reader.Get(ctx, pkey, prof); err != nil {
		if client.IgnoreNotFound(err) == nil {
			r.profiles.drop(pkey)
			p.refuse(string(actuation.CodeProfileMissing), "profile "+string(cmd.Spec.ProfileRef)+" no longer exists")
			return nil, false, nil
		}
		return nil, false, fmt.Errorf("reading CommandProfile %s of command %s/%s: %w", pkey.Name, cmd.Namespace, cmd.Name, err)
	}
	r.profiles.put(prof, time.Now())
	return prof, false, nil
}

// admit decides the command at the node against prof: on a fast pass who admits it (or a
// refusal, or the hand-off to the manager); on a pass the manager decided, admission again
// at the edge. ok false: the pass stops here (p says how, or it waits).
func (r *Room) admit(ctx context.Context, p *cmdPass, prof *wbv1.CommandProfile, env *wbv1.Environment) (claimBy string, ok bool) {
	cmd := p.cmd
	if p.fast {
		// One hop: this node decides admission itself with the actuation core against the
		// effective profile it just read; only what the profile or a remembered grant bound
		// to this environment admits is taken here (allow-once consent, holds and refusals
		// stay the manager's).
		by, ok := fastPathAdmit(cmd, prof, env, r.liveGrant(ctx, cmd.Namespace))
		if !ok && p.claimed {
			// Claimed by an earlier pass that started nothing (the store has no record),
			// and the profile no longer admits it: this node owns its outcome now.
			p.refuse(string(actuation.CodeArgvNotAdmitted), "the effective profile "+prof.Name+" no longer admits this argv at the node")
			return "", false
		}
		if !ok {
			p.handOff = true // consent, a refusal or a hold: the manager's to decide
			return "", false
		}
		p.admittedBy, p.admittedContext = by, env.Status.EffectiveOperationalContext
		markCommand(cmd, "node-admitted")
		return by, true
	}
	if actuation.CheckAdmissionContext(actuation.ContextClass(cmd.Status.AdmittedContext), actuation.ContextClass(env.Status.EffectiveOperationalContext)) != nil {
		// Admitted under an earlier operational context of the environment: not started
		// under the new one; the manager re-evaluates it and its status write wakes this.
		return "", false
	}
	if ref := admitAtNode(cmd, prof, env, r.liveGrant(ctx, cmd.Namespace)); ref != nil {
		// Defence in depth: admission again, at the edge, against the effective profile.
		p.refuse(string(ref.Code), ref.Message)
		return "", false
	}
	return "", true
}

func (r *Room) start(ctx context.Context, p *cmdPass) error {
	if !r.reserveSlot(p) {
		return nil // every slot is taken: it waits, nothing decided (slots.go)
	}
	defer r.releaseSlot(p) // a slot no start took (a refusal, a wait, a guest command)
	cmd := p.cmd
	t, err := r.placed(ctx, p)
	if t == nil || err != nil {
		return err
	}
	sess, env, roots, live := &t.sess, &t.env, t.roots, t.live
	prof, memo, err := r.effectiveProfile(ctx, p)
	if prof == nil || err != nil {
		return err
	}
	core, intent := convert.Profile(&prof.Spec), convert.Intent(&cmd.Spec)
	claimBy, ok := r.admit(ctx, p, prof, env)
	if !ok {
		return nil
	}
	envVars, ref := actuation.CuratedEnv(core, intent.Env)
	if ref != nil {
		p.refuse(string(ref.Code), ref.Message)
		return nil
	}
	envVars = nodekit.GitPinnedEnv(core.Executable, nodekit.ResolveExecutable(core.Executable), envVars)
	claim := func() (bool, error) { return r.claim(ctx, p, claimBy) }
	if memo {
		claim = func() (bool, error) { return r.claimCurrent(ctx, p, claimBy, prof.ResourceVersion) }
	}
	// The environment's executor (the backend's port: the host sandbox or the guest)
	// checks and translates the command; the room never asks which one it holds.
	ex, err := r.d.Executor(env)
	if err != nil {
		p.refuse(string(actuation.CodeOf(err)), err.Error())
		return nil
	}
	if err := r.d.VerifyRoots(string(env.UID), roots); err != nil {
		p.refuse(string(actuation.CodeOf(err)), err.Error())
		return nil
	}
	c, ref := ex.Command(backends.CommandRequest{Profile: core, Roots: roots, Intent: intent, Env: envVars})
	if ref != nil {
		p.refuse(string(ref.Code), ref.Message)
		return nil
	}
	if c.Remote != nil {
		if claimed, err := claim(); !claimed || err != nil {
			if err == nil {
				r.staleMemo(ctx, p, env)
			}
			return err
		}
		r.d.RecordBefore(ctx, env, sess.Name, string(cmd.UID)) // seed 004: state before, when recorded
		return r.startRemote(p, c.Remote, string(env.UID), string(sess.UID), live)
	}
	return r.startSandboxed(ctx, p, t, *c.Sandbox, claim)
}

// startSandboxed runs an admitted command in the host sandbox (runs.Table.Launch): the
// start is recorded (with the claim) while the sandbox is set up, before the program is
// exec'd; the process gets its own cgroup and its PID record.
func (r *Room) startSandboxed(ctx context.Context, p *cmdPass, t *target, spec procexec.Spec, claim func() (bool, error)) error {
	cmd := p.cmd
	sess, env, live := &t.sess, &t.env, t.live
	spec.Resources, spec.CgroupID = r.d.Limits(env), string(cmd.UID)
	spec.Slot = p.slot
	spec.FileSizeLimit = r.d.FileSizeLimit(env) // the agent's storage.go: EFBIG past it
	if spans.Enabled() {
		spec.Trace = spans.Marker(cmd.Namespace + "/" + cmd.Name)
	}
	// The claim (an API write) and the store's start record (an fsync) are independent:
	// both must hold before the program runs, neither needs the other — and neither needs
	// the sandbox, which is set up meanwhile (launch: the program is exec'd only once both
	// landed; a helper that never gets the go-ahead ends without running anything, also
	// when this process dies).
	// The creator's share of the node's concurrent-command slots (the agent's shares.go, Deps.AcquireShare), held until
	// the process ended: one identity cannot take every slot.
	release, code, msg := r.d.AcquireShare(ctx, cmd.Namespace, cmd.Spec.CreatedBy)
	if code != "" {
		p.refuse(code, msg)
		return nil
	}
	seqFrom := live.LastSeq() + 1 // the data plane's output stream starts here
	out := &liveOutput{rg: live}
	spec.OnOutput = out.write
	lc := &Live{Key: client.ObjectKeyFromObject(cmd), EnvUID: string(env.UID), Finished: make(chan struct{}),
		Out: live, SeqFrom: seqFrom}
	h, o, late, proceed, err := r.d.Table.Launch(r.d.Runner, runs.LaunchSpec[Outcome]{
		UID: string(cmd.UID), Spec: spec, Running: string(wbv1.CommandRunning), Live: lc,
		// p is the recording goroutine's until launch returns.
		Record: func() (store.Command, bool, error) {
			return r.recordStart(p, string(sess.UID), claim)
		},
		Ready: func() {
			markCommand(cmd, "node-claimed-and-recorded")
			r.d.RecordBefore(ctx, env, sess.Name, string(cmd.UID)) // seed 004: state before, when recorded
		},
		StartFailed: commandStartFailed,
		PIDDelay:    r.d.Cgroups != nil && r.d.Cgroups.Available(),
		PIDRecorded: func(err error) { r.pidRecorded(cmd, err) },
	})
	if err != nil || !proceed {
		release()
		r.slotFreed() // the start ended before the program: its slot is free again
		if err == nil {
			r.staleMemo(ctx, p, env)
		}
		return err // nothing ran: a refusal, a replay, or a stale memo (see recordStart)
	}
	if o != nil {
		release()
		r.slotFreed()
		p.finish(o)
		return nil
	}
	go func() {
		<-h.Done()
		release()
		r.slotFreed() // its slot is free (the runner released it before Done)
	}()
	go r.awaitCommand(cmd.DeepCopy(), h, out, lc.Started)
	if late {
		// Started after shutdown took its list (a pass outliving the manager's graceful
		// stop): nothing of it may outlive the agent, so this pass stops it and waits.
		h.Kill(procexec.OriginCancel)
		<-h.Done()
		return nil
	}
	// No status write for the start itself (the store's start record, written before the
	// program ran, is the durable record; status is its published copy): a command that
	// ends within runs.RunningDelay is written once, decision, start and outcome together,
	// by the pass its outcome wakes (awaitCommand); one still running then is woken here
	// and that pass writes Running (step, runs.Table.RunningDue). Nothing blocks this pass.
	wake := cmd.DeepCopy()
	time.AfterFunc(runs.RunningDelay, func() {
		select {
		case <-lc.Finished:
		default:
			r.d.Wake(wake)
		}
	})
	return nil
}

// startedMessage is the Started condition's message of a command running in the host
// sandbox (h its handle; nil: a command in a VM guest, or none known).
func startedMessage(h *procexec.Handle) string {
	if h == nil {
		return "the process runs on this node"
	}
	return fmt.Sprintf("pid %d in its own process group, no network, writes confined to the environment", h.Info().Pid)
}

// pidRecorded marks (or logs the failure of) a running command's PID record, written off
// the pass (runs.Table.recordPID). A store failure is only logged: the outcome's own commit,
// which status waits for, reports its failures.
func (r *Room) pidRecorded(cmd *wbv1.TerminalCommand, err error) {
	if err != nil {
		if r.d.Ctx != nil {
			ctrl.LoggerFrom(r.d.Ctx).Error(err, "Storing the PID record of a running command; recovery relies on its cgroup", "command", cmd.Namespace+"/"+cmd.Name)
		}
		return
	}
	markCommand(cmd, "node-pid-recorded")
}

// commandStartFailed is the outcome of a command the runner did not start: Refused with
// the runner's code at a cap, else Failed (start-failed).
func commandStartFailed(err error) *Outcome {
	o := &Outcome{Phase: wbv1.CommandRefused, Message: err.Error(), Completed: time.Now()}
	if refused, code := runs.StartRefusal(err); refused {
		o.RefusalCode = code
	} else {
		o.Phase, o.RefusalCode = wbv1.CommandFailed, code
	}
	return o
}

// claim takes the decision on a command this node admitted on a pass that has not decided
// it yet: admitHere, in memory — the decision reaches status with the start or the outcome
// (no write of its own: the manager never decides a command bound to this node, so there
// is nothing to win). Outside the fast path (the manager decided) there is nothing to take.
func (r *Room) claim(_ context.Context, p *cmdPass, by string) (bool, error) {
	if !p.fast || p.claimed {
		return true, nil
	}
	p.admitHere(r.d.NodeName, by, p.admittedContext, time.Time{})
	markCommand(p.cmd, "node-claim-taken")
	return true, nil
}

// claimCurrent is claim for a pass that admitted the command against the node's memo of its
// profile: the profile is read again from the API server while the start record is
// written, and the pass proceeds only when that read is the version admitted against — so what the node
// starts is always admitted by the current profile. A profile changed (or gone) since the
// memo's read: the pass starts nothing and writes nothing (p.reread; the start record is
// removed again) and the next pass, woken by the requeue, decides against the current
// profile.
func (r *Room) claimCurrent(ctx context.Context, p *cmdPass, by, admittedRV string) (bool, error) {
	key := types.NamespacedName{Namespace: p.cmd.Namespace, Name: string(p.cmd.Spec.ProfileRef)}
	type read struct {
		prof *wbv1.CommandProfile
		err  error
	}
	got := make(chan read, 1)
	go func() {
		var prof wbv1.CommandProfile
		err := r.d.Reader.Get(ctx, key, &prof)
		got <- read{&prof, err}
	}()
	claimed, err := r.claim(ctx, p, by)
	cur := <-got
	markCommand(p.cmd, "node-profile-reread")
	switch {
	case cur.err == nil:
		r.profiles.put(cur.prof, time.Now())
	case apierrors.IsNotFound(cur.err):
		r.profiles.drop(key)
	}
	if !claimed || err != nil {
		return claimed, err
	}
	if cur.err != nil && !apierrors.IsNotFound(cur.err) {
		return false, fmt.Errorf("reading CommandProfile %s of command %s/%s again: %w", key.Name, p.cmd.Namespace, p.cmd.Name, cur.err)
	}
	if cur.err != nil || cur.prof.ResourceVersion != admittedRV {
		markCommand(p.cmd, "node-profile-changed")
		p.reread, p.fresh = true, nil
		if cur.err == nil {
			p.fresh = cur.prof
		}
		p.result.Requeue = true //nolint:staticcheck // SA1019: a rate-limited requeue; the claim's own event wakes it too
		return false, nil
	}
	return true, nil
}

// staleMemo decides a command this pass admitted against the node's memo of its profile
// when the profile read again differs (p.reread): nothing started, and this node, which
// took the decision, decides again against the profile just read — refused when it no
// longer admits the command (or is gone), else left to the next pass (requeued).
func (r *Room) staleMemo(ctx context.Context, p *cmdPass, env *wbv1.Environment) {
	if !p.reread {
		return
	}
	if p.fresh == nil {
		p.reread = false
		p.refuse(string(actuation.CodeProfileMissing), "profile "+string(p.cmd.Spec.ProfileRef)+" no longer exists")
		return
	}
	if _, ok := fastPathAdmit(p.cmd, p.fresh, env, r.liveGrant(ctx, p.cmd.Namespace)); !ok {
		p.reread = false
		p.refuse(string(actuation.CodeArgvNotAdmitted), "the effective profile "+p.fresh.Name+" no longer admits this argv at the node")
	}
}

// recordStart records a command's start durably before any process exists — the rule that
// makes re-reconciling never run a command twice. proceed is false when the pass already
// has its outcome: a refusal, or the replay of the command that holds the same idempotency
// key (or a requeue while that one still runs).
//
// claim, when set, runs while the record is written (the fast path's claim): when it does
// not succeed, a record this call created is removed again — no process exists for it — and
// nothing proceeds.
func (r *Room) recordStart(p *cmdPass, sessUID string, claim func() (bool, error)) (rec store.Command, proceed bool, err error) {
	cmd := p.cmd
	type stored struct {
		rec     store.Command
		created bool
		err     error
	}
	done := make(chan stored, 1)
	go func() {
		rec, created, err := r.d.Store.RecordCommandStart(store.Command{
			UID: string(cmd.UID), Namespace: cmd.Namespace, Name: cmd.Name, SessionUID: sessUID,
			IdempotencyKey: cmd.Spec.IdempotencyKey, ArgvDigest: argvDigestOf(cmd),
			AdmittedBy: p.admittedBy, AdmittedContext: string(p.admittedContext),
		})
		markCommand(cmd, "node-start-record-stored")
		done <- stored{rec, created, err}
	}()
	claimed, claimErr := true, error(nil)
	if claim != nil {
		claimed, claimErr = claim()
	}
	st := <-done
	rec, created, err := st.rec, st.created, st.err
	if !claimed || claimErr != nil {
		if err == nil && created {
			if derr := r.d.Store.Commands().Delete(rec.UID); derr != nil {
				return rec, false, errors.Join(claimErr, fmt.Errorf("removing the start record of unclaimed command %s: %w", cmd.Name, derr))
			}
		}
		return rec, false, claimErr
	}
	if err != nil {
		if code := string(actuation.CodeOf(err)); code != "" {
			p.refuse(code, err.Error())
			return rec, false, nil
		}
		return rec, false, err
	}
	if !created {
		if o := runs.Decode[Outcome](rec.Outcome); o != nil {
			o.Message = fmt.Sprintf("replay of %s (idempotency key %q): %s", rec.Name, cmd.Spec.IdempotencyKey, o.Message)
			p.finish(o)
		} else {
			p.result.RequeueAfter = time.Second
		}
		return rec, false, nil
	}
	return rec, true, nil
}
