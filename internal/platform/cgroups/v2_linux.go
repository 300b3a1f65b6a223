//go:build linux

package cgroups

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"
)

// agentLeaf is where ensureParentV2 moves the processes that sit in the mount root when
// that root is not the host's root cgroup (the agent in a container with its own cgroup
// namespace): v2 forbids enabling controllers for children of a cgroup that has
// processes of its own ("no internal processes"). It is a sibling of the parent, so a
// Sweep never touches it.
const agentLeafSuffix = ".agent"

// ensureParentV2 creates the parent with cpu, memory and pids enabled for its children.
func (m *Manager) ensureParentV2() (*cgroup2.Manager, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	all := &cgroup2.Resources{CPU: &cgroup2.CPU{}, Memory: &cgroup2.Memory{}, Pids: &cgroup2.Pids{}}
	if m.v2ready {
		return cgroup2.Load("/"+m.parent, cgroup2.WithMountpoint(m.root))
	}
	pm, err := cgroup2.NewManager(m.root, "/"+m.parent, all)
	if err != nil && errors.Is(err, unix.EBUSY) {
		if eerr := m.evacuateRootV2(); eerr != nil {
			return nil, fmt.Errorf("%w (moving the root's processes to a leaf: %v)", err, eerr)
		}
		pm, err = cgroup2.NewManager(m.root, "/"+m.parent, all)
	}
	if err != nil {
		return nil, err
	}
	// The parent's own children need the controllers too.
	if err := pm.ToggleControllers([]string{"cpu", "memory", "pids"}, cgroup2.Enable); err != nil {
		return nil, err
	}
	if err := writeSubtree(filepath.Join(m.root, m.parent), "+cpu +memory +pids"); err != nil {
		return nil, err
	}
	m.v2ready = true
	return pm, nil
}

func writeSubtree(dir, v string) error {
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte(v), 0); err != nil {
		return fmt.Errorf("enable %q for the children of %s: %w", v, dir, err)
	}
	return nil
}

// evacuateRootV2 moves every process of the mount root into <root>/<parent>.agent.
func (m *Manager) evacuateRootV2() error {
	leaf := filepath.Join(m.root, m.parent+agentLeafSuffix)
	if err := os.MkdirAll(leaf, 0o755); err != nil {
		return err
	}
	pids, err := readProcs(filepath.Join(m.root, "cgroup.procs"))
	if err != nil {
		return err
	}
	for _, pid := range pids {
		err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(fmt.Sprint(pid)), 0)
		if err != nil && !errors.Is(err, unix.ESRCH) {
			return fmt.Errorf("move pid %d to %s: %w", pid, leaf, err)
		}
	}
	return nil
}

func (g *Group) createV2() error {
	pm, err := g.m.ensureParentV2()
	if err != nil {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if _, err := pm.NewChild(g.name, g.resourcesV2(g.limits)); err != nil {
		_ = g.Delete()
		return err
	}
	return nil
}

// updateV2 sets l on the group through the same driver.
func (g *Group) updateV2(l Limits) error {
	cg, err := cgroup2.Load("/"+g.Path(), cgroup2.WithMountpoint(g.m.root))
	if err != nil {
		return err
	}
	return cg.Update(g.resourcesV2(l))
}

func (g *Group) resourcesV2(l Limits) *cgroup2.Resources {
	res := &cgroup2.Resources{CPU: &cgroup2.CPU{}, Memory: &cgroup2.Memory{}, Pids: &cgroup2.Pids{}}
	if l.Pids > 0 {
		res.Pids.Max = l.Pids
	}
	if l.MemoryBytes > 0 {
		res.Memory.Max = &l.MemoryBytes
		if fileExists(filepath.Join(g.m.root, g.m.parent, "memory.swap.max")) {
			zero := int64(0)
			res.Memory.Swap = &zero
		}
	}
	if l.CPUMillis > 0 {
		q, p := l.cpuQuota()
		res.CPU.Max = cgroup2.NewCPUMax(&q, &p)
	}
	return res
}

// killV2 writes cgroup.kill (atomic against forks: the kernel kills the whole subtree)
// and waits on cgroup.events until "populated 0".
func (g *Group) killV2(pids []int, deadline time.Time) ([]Proc, error) {
	procs := make([]Proc, 0, len(pids))
	for _, pid := range pids {
		procs = append(procs, readProc(pid))
	}
	cm, err := cgroup2.Load("/"+g.Path(), cgroup2.WithMountpoint(g.m.root))
	if err != nil {
		return procs, err
	}
	if err := cm.Kill(); err != nil {
		return procs, err
	}
	return procs, waitUnpopulated(filepath.Join(g.dir(""), "cgroup.events"), deadline)
}

// waitUnpopulated waits until a v2 cgroup.events file reads "populated 0". kernfs
// signals every change of the file with POLLPRI.
func waitUnpopulated(file string, deadline time.Time) error {
	f, err := os.Open(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	buf := make([]byte, 256)
	for {
		n, err := f.ReadAt(buf, 0)
		if err != nil && n == 0 {
			return fmt.Errorf("read %s: %w", file, err)
		}
		if strings.Contains(string(buf[:n]), "populated 0") {
			return nil
		}
		left := time.Until(deadline)
		if left <= 0 {
			return fmt.Errorf("%s: still populated", file)
		}
		pfd := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLPRI}}
		if _, err := unix.Poll(pfd, int(left/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			return fmt.Errorf("poll %s: %w", file, err)
		}
	}
}
