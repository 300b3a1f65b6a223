package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
)

// Rekey gives the group of kind and fromID the name of toID, keeping its processes and
// limits (a warm-pool VM adopted by its claimer: the VMM's group must carry the claimer's
// name, so tearing down the pool member never touches it). On v1 every hierarchy's
// directory is renamed (a rename within one parent is exact: members, limits and charges
// stay); a hierarchy that refuses is rolled back. The v2 hierarchy refuses renames
// (EPERM), so there the group of toID is created with the same limits, every member
// process is moved into it and the old group is removed; memory already charged stays
// with the old group's parent (the kernel does not move charges), so until the VMM's
// memory turns over the new group's limit bounds only new charges. A group named toID
// that exists already is refused (ErrInvalid): nothing is merged.
func (m *Manager) Rekey(kind Kind, fromID, toID string) (*Group, error) {
	from, err := GroupName(kind, fromID)
	if err != nil {
		return nil, err
	}
	to, err := GroupName(kind, toID)
	if err != nil {
		return nil, err
	}
	old, err := m.Load(from)
	if err != nil {
		return nil, fmt.Errorf("cgroups: rekey %s to %s: %w", from, to, err)
	}
	if _, err := m.Load(to); err == nil {
		return nil, fmt.Errorf("cgroups: rekey %s to %s: %s exists: %w", from, to, to, ErrInvalid)
	}
	if m.mode == ModeV1 {
		if g, err := m.renameV1(old, to); err == nil {
			return g, nil
		} else if !errors.Is(err, os.ErrPermission) {
			return nil, fmt.Errorf("cgroups: rekey %s to %s: %w", from, to, err)
		}
	}
	return m.migrate(old, kind, toID)
}

func (m *Manager) renameV1(old *Group, to string) (*Group, error) {
	g := &Group{m: m, name: to, limits: old.limits, ctrls: old.ctrls}
	var done [][2]string
	for _, c := range v1Controllers {
		src, dst := old.dir(c), g.dir(c)
		if !fileExists(src) {
			continue
		}
		if err := os.Rename(src, dst); err != nil {
			for i := len(done) - 1; i >= 0; i-- {
				_ = os.Rename(done[i][1], done[i][0]) // back to the old name; a failure leaves both names, each removable
			}
			return nil, fmt.Errorf("rename %s: %w", filepath.Join(string(c), old.Path()), err)
		}
		done = append(done, [2]string{src, dst})
	}
	return g, nil
}

// migrate moves every member of old into a new group toID with old's limits and removes
// old. A failure moves the members back and removes the new group.
func (m *Manager) migrate(old *Group, kind Kind, toID string) (*Group, error) {
	limits := old.limits
	if limits == (Limits{}) {
		limits = m.readLimits(old)
	}
	g, err := m.Create(kind, toID, limits)
	if err != nil {
		return nil, fmt.Errorf("cgroups: rekey %s: %w", old.Path(), err)
	}
	pids, err := old.Pids()
	if err == nil {
		for _, pid := range pids {
			if err = g.Add(pid); err != nil {
				break
			}
		}
	}
	if err == nil {
		// Members forked meanwhile followed their parent only if it moved first; move
		// what is still there, once more.
		if left, lerr := old.Pids(); lerr == nil {
			for _, pid := range left {
				if err = g.Add(pid); err != nil {
					break
				}
			}
		}
	}
	if err == nil {
		err = old.Delete()
	}
	if err != nil {
		if moved, perr := g.Pids(); perr == nil {
			for _, pid := range moved {
				_ = old.Add(pid) // best effort: the caller reports the rekey as failed
			}
		}
		_ = g.Delete()
		return nil, fmt.Errorf("cgroups: rekey %s to %s: %w", old.Path(), g.Path(), err)
	}
	return g, nil
}

// readLimits reads the limits a loaded group enforces (pids.max, memory.max and cpu.max
// on v2; pids.max, memory.limit_in_bytes and the CFS quota on v1).
func (m *Manager) readLimits(g *Group) Limits {
	var l Limits
	if m.mode == ModeV2 {
		d := g.dir("")
		if v, err := readUintFile(filepath.Join(d, "pids.max")); err == nil {
			l.Pids = int64(v)
		}
		if v, err := readUintFile(filepath.Join(d, "memory.max")); err == nil {
			l.MemoryBytes = int64(v)
		}
		if b, err := os.ReadFile(filepath.Join(d, "cpu.max")); err == nil {
			var quota string
			var period uint64
			if n, _ := fmt.Sscanf(string(b), "%s %d", &quota, &period); n == 2 && quota != "max" && period > 0 {
				var q int64
				if _, err := fmt.Sscanf(quota, "%d", &q); err == nil {
					l.CPUMillis = q * 1000 / int64(period)
				}
			}
		}
		return l
	}
	if v, err := readUintFile(filepath.Join(g.dir(Pids), "pids.max")); err == nil {
		l.Pids = int64(v)
	}
	if v, err := readUintFile(filepath.Join(g.dir(Memory), "memory.limit_in_bytes")); err == nil && v < 1<<62 {
		l.MemoryBytes = int64(v)
	}
	if v, err := readUintFile(filepath.Join(g.dir(CPU), "cpu.cfs_quota_us")); err == nil {
		if p, err := readUintFile(filepath.Join(g.dir(CPU), "cpu.cfs_period_us")); err == nil && p > 0 {
			l.CPUMillis = int64(v) * 1000 / int64(p)
		}
	}
	return l
}
