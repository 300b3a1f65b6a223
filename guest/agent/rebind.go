package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
)

// rebindFile is where a rebind persists the guest's binding, in the agent's state
// directory (a tmpfs of this boot in a VM): an agent restarted by the guest init reads it
// before the boot input, so a re-bound guest never falls back to its boot binding.
const rebindFile = "binding.json"

func (a *Agent) rebindPath() string { return filepath.Join(a.cfg.StateDir, rebindFile) }

// loadBinding returns the binding this agent serves: the persisted rebind if there is one,
// otherwise the boot input's.
func (a *Agent) loadBinding() (protocol.Binding, error) {
	p := a.rebindPath()
	if _, err := os.Lstat(p); err == nil {
		return LoadBindingFile(p)
	} else if !errors.Is(err, os.ErrNotExist) {
		return protocol.Binding{}, fmt.Errorf("binding: %w", err)
	}
	return a.cfg.Binding()
}

func (a *Agent) superseded(cn *conn) bool {
	a.bindMu.Lock()
	defer a.bindMu.Unlock()
	return cn.epoch != a.bindEpoch
}

// persistBinding writes b to the state directory (temp file, fsync, rename).
func (a *Agent) persistBinding(b protocol.Binding) error {
	raw, err := json.Marshal(b)
	if err != nil {
		return err
	}
	tmp, err := os.CreateTemp(a.cfg.StateDir, tmpPrefix+"binding-")
	if err != nil {
		return err
	}
	defer func() { _ = os.Remove(tmp.Name()) }() // gone after the rename
	if _, err := tmp.Write(raw); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	if err := os.Rename(tmp.Name(), a.rebindPath()); err != nil {
		return err
	}
	return syncDir(a.cfg.StateDir)
}

// rebind re-binds this guest to args.Binding (protocol/v1/rebind.go): checked against the
// current binding, persisted, swapped (every other channel superseded), then every process,
// session and stage of the previous owner is removed. The answering channel closes after
// the result.
func (a *Agent) rebind(ctx context.Context, cn *conn, args *protocol.RebindArgs) reply {
	a.rebindMu.Lock()
	defer a.rebindMu.Unlock()
	cur, epoch, err := a.expected()
	if err != nil {
		return refused(err)
	}
	if epoch != cn.epoch {
		return refused(actuation.Refusef(actuation.CodeNonceMismatch, "the guest was re-bound: this channel's nonce is no longer its binding"))
	}
	next := args.Binding
	if err := cur.CheckRebind(&next); err != nil {
		return refused(err)
	}
	if a.cfg.LocalCID != nil {
		if cid, err := a.cfg.LocalCID(); err != nil || cid != next.GuestCID {
			return refused(actuation.Refusef(actuation.CodeCIDMismatch, "rebind names CID %d, this guest is CID %d (%v)", next.GuestCID, cid, err))
		}
	}
	if err := a.persistBinding(next); err != nil {
		return refused(fmt.Errorf("%w: %w", actuation.Refusef(actuation.CodeIOError, "persist the rebind"), err))
	}
	a.bindMu.Lock()
	a.binding = &next
	a.bindEpoch++
	a.bindMu.Unlock()
	a.cfg.Logf("re-bound to generation %d", next.SourceGeneration)

	d := protocol.RebindData{BootID: a.bootID, ChannelsReplaced: uint32(max(a.nconns.Load()-1, 0))}
	d.SessionsClosed, d.ProcessesKilled = a.clearAll(ctx)
	stages, serr := a.stages.dropAll()
	d.StagesDropped = stages
	a.quiesced.Store(false)
	var r reply
	if serr != nil {
		// The binding moved; a stage file that could not be removed is not served (it is no
		// longer recorded) but its removal cannot be proved.
		r = unknown(string(actuation.CodeIOError), fmt.Errorf("drop stages: %w", serr), d)
	} else {
		r = ok(d, nil)
	}
	r.after = func() {} // the channel ends: the host handshakes again with the new binding
	return r
}

// clearAll kills every process and PTY session and forgets the sessions, waiting (within
// ctx) for the sessions' processes to exit. Spawns in flight belong to superseded channels:
// their process groups are killed and their own requests unregister them.
func (a *Agent) clearAll(ctx context.Context) (sessions, procs uint32) {
	a.mu.Lock()
	var ss []*session
	for id, s := range a.sessions {
		if s != nil {
			ss = append(ss, s)
		}
		delete(a.sessions, id) // a reservation too: that session is refused when it starts
	}
	for _, p := range a.procs {
		if p.revoke() {
			procs++
		}
	}
	a.mu.Unlock()
	for _, s := range ss {
		_ = s.proc.signalGroup(unix.SIGKILL) // refused only when the group already exited
		_ = s.ptmx.Close()
	}
	for _, s := range ss {
		select {
		case <-s.done:
		case <-ctx.Done():
		}
	}
	return uint32(len(ss)), procs
}
