package qemumicrovm

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/vmrecord"
	"sensorium.dev/workbench/internal/platform/loopdisk"
)

// Recovery outcomes (the node agent's vocabulary).
const (
	OutcomeRecovered   = "recovered"
	OutcomeTerminated  = "terminated"
	OutcomeQuarantined = "quarantined"
	OutcomeFailed      = "failed-retryable"
)

// Recover is the broker's startup sweep over <StateDir>/vms. A previous "running" is
// never trusted:
//
//   - a VM of an environment the store no longer knows is torn down (terminated);
//   - a VM of a known environment is adopted only on an exact match (see adopt: completed
//     record, recorded process incarnations alive, pinned sockets unchanged, handshake
//     with the recorded binding accepted) — "recovered", keeping its generation;
//     anything else — an unfinished boot, a dead process, a replaced socket, a refused
//     or failed handshake, an unreadable record — is quarantined: its processes killed,
//     its working files removed, a stopped tombstone kept so the next boot advances the
//     generation;
//   - directories that are not environments (the KVM probe's, strays) are removed with
//     their processes;
//   - finally any QEMU or vsock device process of the configured binaries whose command
//     line names a directory under vms/ and that no adopted VM owns is killed, so no
//     orphan survives a crash between a launch and its record update.
//
// Failures to clean up are reported per resource as failed-retryable; the error is
// non-nil only when the sweep could not run at all.
func (b *Backend) Recover(ctx context.Context, known map[string]backends.Spec) ([]backends.RecoveryAction, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("recover %s: %w", ID, err)
	}
	var actions []backends.RecoveryAction
	act := func(resource, outcome, msg string) {
		actions = append(actions, backends.RecoveryAction{Resource: resource, Outcome: outcome, Message: msg})
	}
	names, err := listDir(b.vmsDir)
	if err != nil {
		return nil, fmt.Errorf("recover %s: %w", ID, err)
	}
	for _, name := range names {
		if err := ctx.Err(); err != nil {
			return actions, fmt.Errorf("recover %s: %w", ID, err)
		}
		path := filepath.Join(b.vmsDir, name)
		fi, err := os.Lstat(path)
		if err != nil {
			continue
		}
		if !fi.IsDir() {
			if err := os.Remove(path); err != nil {
				act(path, OutcomeFailed, "not a VM directory; remove: "+err.Error())
			} else {
				act(path, OutcomeTerminated, "not a VM directory")
			}
			continue
		}
		if b.checkID(name) != nil {
			// The KVM probe's directory or a stray: kill what runs there, remove it.
			left, err := b.killAll(path, nil, nil)
			if err == nil && len(left) == 0 {
				err = os.RemoveAll(path)
			}
			if err != nil || len(left) > 0 {
				act(path, OutcomeFailed, fmt.Sprintf("not an environment's VM directory; left %v: %v", left, err))
			} else {
				act(path, OutcomeTerminated, "not an environment's VM directory")
			}
			continue
		}
		actions = append(actions, b.recoverOne(ctx, name, known)...)
	}
	// Orphans: processes of our binaries naming a VM directory that no VM of this process
	// owns.
	owned := map[ProcIdentity]bool{}
	b.mu.Lock()
	for _, v := range b.vms {
		owned[*v.rec.QEMU], owned[*v.rec.Device] = true, true
	}
	b.mu.Unlock()
	stray, err := scanOwned(b.vmsDir, []string{b.qemuBin, b.devBin})
	if err != nil {
		return actions, fmt.Errorf("recover %s: %w", ID, err)
	}
	for _, id := range stray {
		if owned[id] {
			continue
		}
		what := fmt.Sprintf("process %s %s", id, id.Exe)
		if _, err := killExact(id, killWait); err != nil {
			act(what, OutcomeFailed, "unrecorded VMM or device process; kill: "+err.Error())
		} else {
			act(what, OutcomeTerminated, "unrecorded VMM or device process of a VM directory")
		}
	}
	actions = append(actions, b.sweepDisks(known)...)
	return actions, nil
}

// sweepDisks deletes the working disks (and interrupted clones) of environments the
// store does not know and no VM of this process runs: their reservation is released.
func (b *Backend) sweepDisks(known map[string]backends.Spec) []backends.RecoveryAction {
	if b.cfg.Disks == nil {
		return nil
	}
	names, err := listDir(b.cfg.Disks.Dir())
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return []backends.RecoveryAction{{Resource: b.cfg.Disks.Dir(), Outcome: OutcomeFailed, Message: "list working disks: " + err.Error()}}
	}
	var out []backends.RecoveryAction
	for _, name := range names {
		id, isImage := strings.CutSuffix(name, loopdisk.ImageSuffix)
		if isImage && !strings.HasPrefix(name, ".") {
			if _, ok := known[id]; ok || b.get(id) != nil {
				continue
			}
		}
		path := filepath.Join(b.cfg.Disks.Dir(), name)
		if err := os.Remove(path); err != nil {
			out = append(out, backends.RecoveryAction{Resource: path, Outcome: OutcomeFailed, Message: "working disk of an unknown environment; remove: " + err.Error()})
		} else {
			out = append(out, backends.RecoveryAction{Resource: path, Outcome: OutcomeTerminated, Message: "working disk of an environment not known to the store: deleted"})
		}
	}
	return out
}

func (b *Backend) recoverOne(ctx context.Context, id string, known map[string]backends.Spec) []backends.RecoveryAction {
	defer b.lock(id)()
	dir := b.dir(id)
	one := func(outcome, msg string) []backends.RecoveryAction {
		return []backends.RecoveryAction{{Resource: dir, Outcome: outcome, Message: msg}}
	}
	if v := b.get(id); v != nil {
		return one(OutcomeRecovered, fmt.Sprintf("generation %d already runs in this process", v.rec.Generation))
	}
	_, isKnown := known[id]
	rec, rerr := readRecord(dir)
	if !isKnown {
		left, err := b.destroyDir(dir, true)
		if err != nil || len(left) > 0 {
			return one(OutcomeFailed, fmt.Sprintf("environment not known to the store; teardown left %v: %v", left, err))
		}
		return one(OutcomeTerminated, "environment not known to the store: VM torn down")
	}
	if rerr != nil {
		left, err := b.killAll(dir, nil, nil)
		if err == nil {
			_, err = clearDir(dir, true)
		}
		if err != nil || len(left) > 0 {
			return one(OutcomeFailed, fmt.Sprintf("unreadable recovery record (%v); cleanup left %v: %v", rerr, left, err))
		}
		return one(OutcomeQuarantined, fmt.Sprintf("unreadable recovery record (%v): processes killed, working files removed", rerr))
	}
	if rec.ID != id {
		b.stopRecord(&Record{ID: id, Generation: rec.Generation}, "record names another environment")
		return one(OutcomeQuarantined, fmt.Sprintf("the record names environment %q", rec.ID))
	}
	if rec.State == StateStopped {
		// A tombstone: nothing should run; kill whatever does.
		left, err := b.killAll(dir, rec, nil)
		if err != nil || len(left) > 0 {
			return one(OutcomeFailed, fmt.Sprintf("stopped VM still has processes %v: %v", left, err))
		}
		return nil
	}
	v, err := b.adopt(ctx, rec)
	if err != nil {
		b.stopRecord(rec, "quarantined at recovery: "+err.Error())
		left, _ := b.killAll(dir, nil, nil)
		if len(left) > 0 {
			return one(OutcomeFailed, fmt.Sprintf("not an exact match (%v); processes survive: %v", err, left))
		}
		return one(OutcomeQuarantined, fmt.Sprintf("generation %d not adopted: %v; processes killed, working files removed", rec.Generation, err))
	}
	return one(OutcomeRecovered, fmt.Sprintf("generation %d adopted: the recorded QEMU and vsock device run and the guest accepted the recorded binding", v.rec.Generation))
}

// listDir lists a directory's names (bounded, sorted); a missing directory is empty.
func listDir(dir string) ([]string, error) { return vmrecord.ListDir(dir) }
