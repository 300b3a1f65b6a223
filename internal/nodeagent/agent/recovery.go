package agent

import (
	"context"
	"fmt"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/environments"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// maxRecoveryReport bounds the recovery actions published in WorkbenchNode status.
const maxRecoveryReport = 64

// recover is the authoritative sweep before serving: it kills every process group a
// previous agent process recorded (matched by pgid and start time, so a recycled pid is
// never signalled), removes temp roots, lets each backend sweep its own resources, and
// marks every in-flight session, command, wait and patch interrupted. A previous "Running"
// is never trusted.
func (a *Agent) recover(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	now := time.Now()
	var actions []wbv1.RecoveryAction
	report := func(resource, outcome, msg string) {
		log.Info("Recovery", "resource", resource, "outcome", outcome, "message", msg)
		actions = append(actions, wbv1.RecoveryAction{Resource: resource, Outcome: wbv1.RecoveryOutcome(outcome), Message: msg, Time: metav1.NewTime(now)})
		_, _ = a.store.AppendRecovery(store.Recovery{Time: now, Resource: resource, Action: "sweep", Outcome: outcome, Detail: msg})
	}

	cmds, err := a.store.Commands().List(0)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if isFinalCommandPhase(c.Phase) || c.PGID == 0 {
			continue
		}
		outcome, msg := killRecorded(c.PGID, c.PID, c.StartTime)
		report(fmt.Sprintf("command/%s/%s pgid %d", c.Namespace, c.Name, c.PGID), outcome, msg)
	}
	sessions, err := a.store.Sessions().List(0)
	if err != nil {
		return err
	}
	for _, s := range sessions {
		if isFinalSessionPhase(s.Phase) || s.PGID == 0 {
			continue
		}
		outcome, msg := killRecorded(s.PGID, s.PID, s.StartTime)
		report(fmt.Sprintf("session/%s/%s pgid %d", s.Namespace, s.Name, s.PGID), outcome, msg)
	}
	// Every command and session group of the previous process, with whatever it holds.
	a.sweepCgroups(report)
	// Private temp dirs of commands live under <state>/tmp; nothing there survives a restart.
	tmp := a.cfg.StateDir + "/tmp"
	if entries, err := os.ReadDir(tmp); err == nil {
		for _, e := range entries {
			p := tmp + "/" + e.Name()
			if err := os.RemoveAll(p); err != nil {
				report("temp-root "+p, store.OutcomeFailedRetryable, err.Error())
			} else {
				report("temp-root "+p, store.OutcomeTerminated, "removed")
			}
		}
	}
	envs, err := a.store.Environments().List(0)
	if err != nil {
		return err
	}
	// The inventory: what the API server still wants of this node. What the node holds for
	// anything else is an orphan (its object was deleted, or its finalizer released, while
	// no agent ran here) and is removed — as virt-handler does for domains.
	wanted, err := a.wantedInventory(ctx)
	if err != nil {
		report("inventory", store.OutcomeFailedRetryable, "orphans kept until the next start: "+err.Error())
	}
	known := map[string]map[string]backends.Spec{}
	for _, e := range envs {
		if e.Phase == string(backends.PhaseClosed) {
			continue
		}
		if wanted != nil && !wanted.environments[e.UID] {
			if err := a.store.Environments().Delete(e.UID); err != nil {
				return err
			}
			report(fmt.Sprintf("environment/%s/%s", e.Namespace, e.Name), store.OutcomeTerminated,
				"orphan: its Environment no longer exists; the backend sweep removes what it held")
			continue
		}
		if known[e.Backend] == nil {
			known[e.Backend] = map[string]backends.Spec{}
		}
		known[e.Backend][e.UID] = environments.SpecFromRecord(e)
	}
	for _, id := range a.backends.IDs() {
		b, _ := a.backends.Get(id)
		acts, err := b.Recover(ctx, known[id])
		if err != nil {
			report("backend "+id, store.OutcomeFailedRetryable, err.Error())
			continue
		}
		for _, act := range acts {
			report(act.Resource, act.Outcome, act.Message)
		}
	}
	sum, err := a.store.MarkInterrupted("agent restarted", now)
	if err != nil {
		return err
	}
	if wanted != nil {
		if err := a.pruneOrphanRecords(wanted, report); err != nil {
			return err
		}
	}
	for _, r := range sum.Records {
		actions = append(actions, wbv1.RecoveryAction{Resource: r.Resource, Outcome: wbv1.RecoveryOutcome(r.Outcome), Message: r.Detail, Time: metav1.NewTime(now)})
	}
	if len(actions) > maxRecoveryReport {
		actions = actions[len(actions)-maxRecoveryReport:]
	}
	a.report.SetRecovery(actions)
	return nil
}

// killWait bounds how long the sweep waits for a SIGKILLed group to exit.
const killWait = 5 * time.Second

// killRecorded terminates a recorded process group. When the leader still exists it must be
// the recorded incarnation (same start time), else the group is left alone and reported
// quarantined: a recycled pid is never signalled. The wait for the kernel to tear the group
// down is an event wait on pidfds of the group's members, bounded (killWait), and happens
// only during the sweep, before the agent serves.
func killRecorded(pgid, pid int, start uint64) (outcome, msg string) {
	alive, err := procexec.GroupExists(pgid)
	if err != nil {
		return store.OutcomeUnknown, err.Error()
	}
	if !alive {
		return store.OutcomeExpired, "no process of the group remained"
	}
	if pid != 0 && start != 0 {
		if st, err := procexec.ProcessStartTime(pid); err == nil && st != start {
			return store.OutcomeQuarantined, fmt.Sprintf("pid %d now belongs to another process (start %d, recorded %d); not signalled", pid, st, start)
		}
	}
	res, err := procexec.KillGroupWait(pgid, time.Now().Add(killWait))
	switch {
	case err != nil:
		return store.OutcomeFailedRetryable, err.Error()
	case res.Gone:
		return store.OutcomeTerminated, "process group killed"
	default:
		return store.OutcomeTerminated, fmt.Sprintf("process group killed; %d exited member(s) await reaping by their parent", res.Unreaped)
	}
}

func isFinalCommandPhase(p string) bool { return wbv1.CommandPhaseIsFinal(wbv1.CommandPhase(p)) }

func isFinalSessionPhase(p string) bool { return wbv1.SessionPhaseIsFinal(wbv1.SessionPhase(p)) }

// inventory is the set of object UIDs on this node the API server still has.
type inventory struct {
	environments, sessions, commands map[string]bool
}

// wantedInventory lists this node's objects from the API server (not the cache, which is
// not started during the sweep), filtered at the server by the node label.
func (a *Agent) wantedInventory(ctx context.Context) (*inventory, error) {
	inv := &inventory{environments: map[string]bool{}, sessions: map[string]bool{}, commands: map[string]bool{}}
	for _, l := range []struct {
		list client.ObjectList
		what string
		into map[string]bool
	}{
		{&wbv1.EnvironmentList{}, "environments", inv.environments},
		{&wbv1.TerminalSessionList{}, "sessions", inv.sessions},
		{&wbv1.TerminalCommandList{}, "commands", inv.commands},
		// ActionRuns keep their start and outcome records in the same table (exactly once).
		{&wbv1.ActionRunList{}, "action runs", inv.commands},
	} {
		if err := a.markUIDs(ctx, a.reader, l.list, l.what, l.into); err != nil {
			return nil, err
		}
	}
	return inv, nil
}

// markUIDs lists (into list, through r) the objects of this node, by its label, and marks
// their UIDs in into; what names them for errors.
func (a *Agent) markUIDs(ctx context.Context, r client.Reader, list client.ObjectList, what string, into map[string]bool) error {
	if err := r.List(ctx, list, client.MatchingLabels{wbv1.NodeLabel: a.cfg.NodeName}); err != nil {
		return fmt.Errorf("listing %s of node %s: %w", what, a.cfg.NodeName, err)
	}
	return meta.EachListItem(list, func(o runtime.Object) error {
		into[string(o.(client.Object).GetUID())] = true
		return nil
	})
}

// pruneOrphanRecords drops the store records of sessions and commands whose objects are
// gone (their processes were killed above): the store stays bounded by what exists.
func (a *Agent) pruneOrphanRecords(inv *inventory, report func(resource, outcome, msg string)) error {
	sessions, err := a.store.Sessions().List(0)
	if err != nil {
		return err
	}
	pruned := 0
	for _, s := range sessions {
		if !inv.sessions[s.UID] {
			if err := a.store.Sessions().Delete(s.UID); err != nil {
				return err
			}
			pruned++
		}
	}
	cmds, err := a.store.Commands().List(0)
	if err != nil {
		return err
	}
	for _, c := range cmds {
		if !inv.commands[c.UID] {
			if err := a.store.Commands().Delete(c.UID); err != nil {
				return err
			}
			pruned++
		}
	}
	if pruned > 0 {
		report("store", store.OutcomeExpired, fmt.Sprintf("dropped %d records of sessions and commands that no longer exist", pruned))
	}
	return nil
}
