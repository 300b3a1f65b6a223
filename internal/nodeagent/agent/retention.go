package agent

import (
	"context"
	"fmt"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/statusapply"
)

// Retention: the node holds an artifact's blob until the artifact's retainedUntil passes or
// the Artifact is deleted, never longer. One sweep enforces both: it collects every blob no
// live, unexpired Artifact of this node references, marks expired artifacts Ready=False
// (Expired), and reports CleanupComplete on deleted ones so the manager releases their
// finalizer. It runs when kicked (artifact deleted, environment torn down) and at the next
// retention deadline, bounded by artifactSweepMax.

// artifactSweepMax bounds the interval between sweeps (blobs stored without an object yet
// become collectable after artifacts.GCMinAge).
const artifactSweepMax = 10 * time.Minute

// ReasonCleanedUp is the CleanupComplete reason of an artifact whose blob the node dropped.
const reasonBlobReleased = "BlobReleased"

// kickArtifactSweep asks for a sweep soon; it never blocks.
func (a *Agent) kickArtifactSweep() {
	select {
	case a.sweepArtifacts <- struct{}{}:
	default:
	}
}

// artifactSweepLoop runs sweeps until ctx ends; every wake-up selects on ctx.
func (a *Agent) artifactSweepLoop(ctx context.Context) error {
	log := ctrl.LoggerFrom(ctx)
	t := time.NewTimer(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-a.sweepArtifacts:
		}
		next, err := a.sweepArtifactsOnce(ctx, time.Now())
		if err != nil {
			log.Error(err, "Sweeping artifact blobs")
			next = time.Minute
		}
		if n, err := a.pruneRecords(ctx); err != nil {
			log.Error(err, "Pruning store records")
			next = min(next, time.Minute)
		} else if n > 0 {
			log.V(1).Info("Pruned store records of deleted objects", "records", n)
		}
		if n, err := a.republishOutcomes(ctx); err != nil {
			log.Error(err, "Republishing stored command outcomes")
			next = min(next, time.Minute)
		} else if n > 0 {
			log.Info("Woke commands whose stored state the API does not show", "commands", n)
		}
		next = min(next, a.cfg.recordRetention())
		if !t.Stop() {
			select {
			case <-t.C:
			default:
			}
		}
		t.Reset(next)
	}
}

// sweepArtifactsOnce enforces retention now and returns the wait until the next deadline.
func (a *Agent) sweepArtifactsOnce(ctx context.Context, now time.Time) (time.Duration, error) {
	var list wbv1.ArtifactList
	if err := a.client.List(ctx, &list, client.MatchingLabels{wbv1.NodeLabel: a.cfg.NodeName}); err != nil {
		return 0, fmt.Errorf("listing artifacts of node %s: %w", a.cfg.NodeName, err)
	}
	keep := map[string]time.Time{}
	next := artifactSweepMax
	for i := range list.Items {
		art := &list.Items[i]
		d := string(art.Status.Digest)
		if d == "" || !art.DeletionTimestamp.IsZero() || art.Status.RetainedUntil == nil {
			continue
		}
		until := art.Status.RetainedUntil.Time
		if !until.After(now) {
			continue
		}
		if until.After(keep[d]) {
			keep[d] = until
		}
		next = min(next, until.Sub(now)+time.Second)
	}
	// GC keeps unreferenced blobs younger than artifacts.GCMinAge (a Put whose status
	// write is pending); the blobs of deleted and expired artifacts go now.
	for i := range list.Items {
		art := &list.Items[i]
		d := string(art.Status.Digest)
		if _, kept := keep[d]; d == "" || kept || (art.DeletionTimestamp.IsZero() && (art.Status.RetainedUntil == nil || art.Status.RetainedUntil.After(now))) {
			continue
		}
		if err := a.blobs.Delete(d); err != nil {
			return 0, fmt.Errorf("removing the blob of artifact %s/%s: %w", art.Namespace, art.Name, err)
		}
	}
	res, err := a.blobs.GC(keep, now)
	if err != nil {
		return 0, err
	}
	if len(res.Deleted) > 0 || res.TempRemoved > 0 {
		ctrl.LoggerFrom(ctx).V(1).Info("Removed artifact blobs", "deleted", len(res.Deleted), "temp", res.TempRemoved, "kept", res.Kept)
	}
	if res.Truncated {
		next = time.Second // more to visit
	}
	for i := range list.Items {
		art := &list.Items[i]
		switch {
		case !art.DeletionTimestamp.IsZero() && !condTrue(art.Status.Conditions, wbv1.ConditionCleanupComplete):
			// Its blob is gone or still referenced by another live artifact: this artifact
			// no longer holds anything.
			if err := a.setArtifactConditions(ctx, art, statusapply.Cond(wbv1.ConditionCleanupComplete, true, reasonBlobReleased,
				"the node holds no blob for this artifact", art.Generation)); err != nil {
				return 0, err
			}
		case art.Status.RetainedUntil != nil && !art.Status.RetainedUntil.After(now) && art.Status.Digest != "" &&
			!condFalseWithReason(art.Status.Conditions, wbv1.ConditionReady, wbv1.ReasonExpired):
			if err := a.setArtifactConditions(ctx, art, statusapply.Cond(wbv1.ConditionReady, false, wbv1.ReasonExpired,
				"retention ended at "+art.Status.RetainedUntil.UTC().Format(time.RFC3339)+"; the blob was removed", art.Generation)); err != nil {
				return 0, err
			}
		}
	}
	if next < time.Second {
		next = time.Second
	}
	return next, nil
}

// expireArtifact ends an artifact's retention now (retainedUntil = now).
func (a *Agent) expireArtifact(ctx context.Context, art *wbv1.Artifact, now metav1.Time, why string) error {
	cur, next := artifactOwned(&art.Status), artifactOwned(&art.Status)
	next.RetainedUntil = &now
	statusapply.Set(&next.Conditions, &next.Conditions, statusapply.Cond(wbv1.ConditionReady, false, wbv1.ReasonExpired, why, art.Generation))
	if _, err := statusapply.Apply(ctx, a.client, FieldManager+"artifact", art, cur, next); err != nil {
		return fmt.Errorf("expiring artifact %s/%s: %w", art.Namespace, art.Name, err)
	}
	return nil
}

func (a *Agent) setArtifactConditions(ctx context.Context, art *wbv1.Artifact, c metav1.Condition) error {
	cur, next := artifactOwned(&art.Status), artifactOwned(&art.Status)
	statusapply.Set(&next.Conditions, &next.Conditions, c)
	if _, err := statusapply.Apply(ctx, a.client, FieldManager+"artifact", art, cur, next); err != nil {
		return fmt.Errorf("writing status of artifact %s/%s: %w", art.Namespace, art.Name, err)
	}
	return nil
}

func condFalseWithReason(conds []metav1.Condition, t, reason string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == metav1.ConditionFalse && c.Reason == reason
		}
	}
	return false
}

// pruneRecords drops (after Config.RecordRetentionSeconds: a record is written for an object
// the cache showed, and a list taken just before may not hold it yet) the store records of sessions, commands and patches whose objects no
// longer exist (the cache holds every object of this node; a record is only ever made for
// an object the cache showed). A command still running in this process keeps its record.
func (a *Agent) pruneRecords(ctx context.Context) (int, error) {
	live := map[string]bool{}
	if err := a.markUIDs(ctx, a.client, &wbv1.TerminalCommandList{}, "commands", live); err != nil {
		return 0, err
	}
	if err := a.markUIDs(ctx, a.client, &wbv1.TerminalSessionList{}, "sessions", live); err != nil {
		return 0, err
	}
	if err := a.markUIDs(ctx, a.client, &wbv1.FilePatchList{}, "file patches", live); err != nil {
		return 0, err
	}
	a.sess.DropClosed(live) // a closed session whose object is gone: drop its ring (a patch's UID is no session's)
	a.commands.View(func(runs map[string]*liveCommand) {
		for uid := range runs {
			live[uid] = true
		}
	})
	for _, uid := range a.sess.UIDs() {
		live[uid] = true
	}
	keep := a.cfg.recordRetention()
	pruned, err := pruneTable(a.store.Commands(), live, keep, func(r *store.Command) (string, time.Time) { return r.UID, r.UpdatedAt })
	if err != nil {
		return pruned, err
	}
	n, err := pruneTable(a.store.Sessions(), live, keep, func(r *store.Session) (string, time.Time) { return r.UID, r.UpdatedAt })
	if pruned += n; err != nil {
		return pruned, err
	}
	n, err = pruneTable(a.store.Patches(), live, keep, func(r *store.Patch) (string, time.Time) { return r.UID, r.UpdatedAt })
	return pruned + n, err
}

// pruneTable deletes the records of t not live and not updated for keep; it returns how
// many it deleted.
func pruneTable[T any](t store.Table[T], live map[string]bool, keep time.Duration, key func(*T) (uid string, updated time.Time)) (int, error) {
	recs, err := t.List(0)
	if err != nil {
		return 0, err
	}
	pruned := 0
	for i := range recs {
		uid, updated := key(&recs[i])
		if !live[uid] && time.Since(updated) > keep {
			if err := t.Delete(uid); err != nil {
				return pruned, err
			}
			pruned++
		}
	}
	return pruned, nil
}

// Footprint is what the agent holds now: the figures a soak test and an operator watch to
// see memory and disk stay bounded on a long-running node.
type Footprint struct {
	LiveCommands   int   // commands held in memory (running, or finished and not yet written)
	LiveSessions   int   // sessions held in memory
	CommandRecords int   // command records in the store
	SessionRecords int   // session records in the store
	StoreBytes     int64 // size of the store file
}

// Footprint reports what the agent holds now.
func (a *Agent) Footprint() (Footprint, error) {
	var f Footprint
	f.LiveCommands = a.commands.Len()
	f.LiveSessions = a.sess.Len()
	cmds, err := a.store.Commands().List(0)
	if err != nil {
		return f, err
	}
	sess, err := a.store.Sessions().List(0)
	if err != nil {
		return f, err
	}
	f.CommandRecords, f.SessionRecords = len(cmds), len(sess)
	if fi, err := os.Stat(a.store.Path()); err == nil {
		f.StoreBytes = fi.Size()
	}
	return f, nil
}
