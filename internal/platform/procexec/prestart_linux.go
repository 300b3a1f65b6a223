//go:build linux

package procexec

import (
	"fmt"
	"os"

	"sensorium.dev/workbench/internal/platform/cgroups"
)

// Pre-started sandboxes (issue 13, "one hop"): most of a sandbox's start is spent before
// the helper reads its configuration — cloning it into its user, mount, PID, UTS, IPC and
// network namespaces, exec'ing it and the Go runtime's start, creating its cgroup and, on
// cgroup v1, moving it into every hierarchy (a migration per hierarchy). None of that
// depends on the command. A Runner with Limits.PrestartedSandboxes > 0 keeps that many
// helpers started ahead, each in a cgroup of its own (command defaults) with its output
// pipe, blocked on its configuration socket; Start takes one, sets its cgroup to the
// command's limits, and configures it exactly as a freshly started helper (roots, mounts,
// capability drop, Landlock, seccomp all happen then, per command). Nothing of a
// pre-started helper is shared with another command, and a helper serves once: it exits
// with its program. Isolation is unchanged — the helper did nothing but wait before.
//
// An idle helper that died (killed from outside) is discarded and the command starts a
// fresh one; a limit the group cannot take (a v1 CPU quota without the cpu hierarchy, a
// memory limit below what the idle helper uses) discards it too.

// pooledSandbox is one pre-started helper with its output pipe and cgroup.
type pooledSandbox struct {
	hp     *helperProc
	outR   *os.File
	cgroup *cgroups.Group // nil without a cgroup manager
}

func (ps *pooledSandbox) discard() {
	ps.hp.discard()
	_ = ps.outR.Close()
	if ps.cgroup != nil {
		_, _ = ps.cgroup.Kill()
		_ = ps.cgroup.Delete()
	}
}

// alive reports whether the helper is still waiting (not exited, not reaped).
// (It is this process's unreaped child, so its /proc entry exists until it is reaped.)
func (ps *pooledSandbox) alive() bool {
	st, err := ReadStat(ps.hp.pid)
	return err == nil && st.State != 'Z' && st.State != 'X'
}

// newSandboxPool is the runner's pool of pre-started command helpers (Pool: refilled only
// while no Start is in progress).
func (r *Runner) newSandboxPool(size int) *Pool[*pooledSandbox] {
	return NewPool(PoolOptions[*pooledSandbox]{
		Size: size,
		Start: func() (*pooledSandbox, error) {
			self, err := r.helperPath()
			if err != nil {
				return nil, err
			}
			return r.prestart(self)
		},
		Discard: (*pooledSandbox).discard,
		Alive:   (*pooledSandbox).alive,
		Busy:    func() bool { return r.starting.Load() > 0 },
	})
}

// helperPath is Limits.HelperPath, else the running executable.
func (r *Runner) helperPath() (string, error) {
	if r.limits.HelperPath != "" {
		return r.limits.HelperPath, nil
	}
	self, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("procexec: locate the sandbox helper: %w", err)
	}
	return self, nil
}

// prestart starts one helper, its output pipe and its cgroup.
func (r *Runner) prestart(self string) (*pooledSandbox, error) {
	outR, outW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("procexec: output pipe: %w", err)
	}
	var g *cgroups.Group
	if r.limits.Cgroups != nil {
		if g, err = CreateCgroup(r.limits.Cgroups, cgroups.KindCommand, "", cgroups.Limits{}); err != nil {
			_ = outR.Close()
			_ = outW.Close()
			return nil, err
		}
	}
	hp, err := startHelper(StartOptions{HelperPath: self, UID: r.limits.SandboxUID, Stdout: outW, Stderr: outW})
	_ = outW.Close()
	if err == nil && g != nil {
		if err = EnterCgroup(g, hp.pid); err != nil {
			hp.discard()
		}
	}
	if err != nil {
		_ = outR.Close()
		if g != nil {
			_, _ = g.Kill()
			_ = g.Delete()
		}
		return nil, err
	}
	return &pooledSandbox{hp: hp, outR: outR, cgroup: g}, nil
}

// takePrestarted returns an idle helper whose cgroup now enforces l, or nil.
func (r *Runner) takePrestarted(l cgroups.Limits) *pooledSandbox {
	ps, ok := r.pool.Take()
	if !ok {
		return nil
	}
	if ps.cgroup != nil && ps.cgroup.Limits() != l {
		if err := ps.cgroup.Update(l); err != nil {
			ps.discard()
			return nil
		}
	}
	return ps
}

// Close discards the runner's idle pre-started helpers (and stops refilling). Running
// commands are not affected.
func (r *Runner) Close() { r.pool.Close() }

// Refill tops the pool up in the background if no start is in progress (Limits.RefillByCaller).
func (r *Runner) Refill() { r.pool.Refill() }

// Warm starts filling the runner's pre-started helpers in the background (Start refills
// after each take; Warm lets the first command find one).
func (r *Runner) Warm() error {
	if _, err := r.helperPath(); err != nil {
		return err
	}
	r.pool.Refill()
	return nil
}
