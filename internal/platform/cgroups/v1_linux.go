//go:build linux

package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/platform/pidfd"
)

// hierarchyV1 restricts containerd's v1 driver to the four controllers a group uses
// (its default would also create directories in net_cls, hugetlb, blkio, ...).
func (m *Manager) hierarchyV1(withCPU bool) cgroup1.Hierarchy {
	return func() ([]cgroup1.Subsystem, error) {
		mem := cgroup1.NewMemory(m.root, cgroup1.OptionalSwap())
		out := []cgroup1.Subsystem{cgroup1.NewPids(m.root), mem, cgroup1.NewFreezer(m.root)}
		if withCPU {
			out = append(out, cgroup1.NewCpu(m.root))
		}
		return out, nil
	}
}

func (g *Group) createV1() error {
	l := g.limits
	res := g.resourcesV1(l)
	g.ctrls = []Controller{Pids, Memory, Freezer}
	if l.CPUMillis > 0 {
		g.ctrls = append(g.ctrls, CPU)
	}
	_, err := cgroup1.New(cgroup1.StaticPath("/"+g.Path()), res, cgroup1.WithHierarchy(g.m.hierarchyV1(l.CPUMillis > 0)))
	if err != nil {
		_ = g.Delete()
		return err
	}
	// The driver creates what it finds; make sure every hierarchy really holds the group
	// (a controller that disappeared between detection and now fails closed).
	for _, c := range g.ctrls {
		if !fileExists(filepath.Join(g.dir(c), "cgroup.procs")) {
			_ = g.Delete()
			return fmt.Errorf("no %s hierarchy for the group: %w", c, ErrUnavailable)
		}
	}
	return nil
}

// updateV1 sets l on the group's existing hierarchies through the same driver.
func (g *Group) updateV1(l Limits) error {
	cg, err := cgroup1.Load(cgroup1.StaticPath("/"+g.Path()), cgroup1.WithHierarchy(g.m.hierarchyV1(l.CPUMillis > 0)))
	if err != nil {
		return err
	}
	return cg.Update(g.resourcesV1(l))
}

func (g *Group) resourcesV1(l Limits) *specs.LinuxResources {
	res := &specs.LinuxResources{}
	if l.Pids > 0 {
		res.Pids = &specs.LinuxPids{Limit: &l.Pids}
	}
	if l.MemoryBytes > 0 {
		res.Memory = &specs.LinuxMemory{Limit: &l.MemoryBytes}
		if g.m.swap {
			res.Memory.Swap = &l.MemoryBytes // memory+swap = memory: no swap
		}
	}
	if l.CPUMillis > 0 {
		q, p := l.cpuQuota()
		res.CPU = &specs.LinuxCPU{Quota: &q, Period: &p}
	}
	return res
}

// killV1 runs one freeze/kill/thaw round: while the group is frozen nothing in it can
// fork or exit, so the member list read then is complete; each member is signalled
// through a pidfd (no pid-reuse race) and, after the thaw, the pidfds say when each has
// exited.
func (g *Group) killV1(deadline time.Time) ([]Proc, error) {
	fz := g.dir(Freezer)
	ferr := setFreezerV1(fz, "FROZEN", deadline)
	pids, err := g.Pids()
	if err != nil {
		_ = setFreezerV1(fz, "THAWED", deadline.Add(time.Second))
		return nil, err
	}
	procs := make([]Proc, 0, len(pids))
	fds := make([]int, 0, len(pids))
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	var errs []error
	for _, pid := range pids {
		p := readProc(pid)
		fd, err := unix.PidfdOpen(pid, 0)
		if errors.Is(err, unix.ESRCH) {
			continue
		}
		if err != nil {
			// No pidfd (very old kernel): signal by pid; the group is frozen, so the pid
			// cannot have been reused yet.
			if kerr := unix.Kill(pid, unix.SIGKILL); kerr == nil {
				procs = append(procs, p)
			}
			continue
		}
		fds = append(fds, fd)
		if err := unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0); err != nil && !errors.Is(err, unix.ESRCH) {
			errs = append(errs, fmt.Errorf("SIGKILL pid %d: %w", pid, err))
			continue
		}
		procs = append(procs, p)
	}
	// Thawing lets the SIGKILLs take effect; a slightly later deadline keeps a
	// FREEZING group from being left frozen when the kill deadline has just passed.
	if err := setFreezerV1(fz, "THAWED", deadline.Add(time.Second)); err != nil {
		errs = append(errs, err)
	}
	if ferr != nil {
		errs = append(errs, fmt.Errorf("freeze (members were signalled anyway): %w", ferr))
	}
	if err := pidfd.Wait(fds, deadline); err != nil {
		errs = append(errs, err)
	}
	return procs, errors.Join(errs...)
}

// setFreezerV1 writes freezer.state and waits until the kernel reports it. The v1
// freezer has no completion notification, so this polls with a growing interval, bounded
// by deadline (containerd's own Freeze waits without bound).
func setFreezerV1(dir, state string, deadline time.Time) error {
	f := filepath.Join(dir, "freezer.state")
	delay := 100 * time.Microsecond
	for {
		if err := os.WriteFile(f, []byte(state), 0); err != nil {
			if errors.Is(err, os.ErrNotExist) {
				return nil
			}
			return fmt.Errorf("write %s %s: %w", f, state, err)
		}
		b, err := os.ReadFile(f)
		if err != nil {
			return fmt.Errorf("read %s: %w", f, err)
		}
		if strings.TrimSpace(string(b)) == state {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: still %s, want %s", f, strings.TrimSpace(string(b)), state)
		}
		time.Sleep(delay)
		delay = min(2*delay, 10*time.Millisecond)
	}
}
