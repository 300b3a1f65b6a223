//go:build linux

package cgroups

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// StartCmd starts cmd with its process born inside the group, so nothing it does can
// happen outside it (Add after Start leaves a window in which the program could fork).
//
//   - v2: clone3(CLONE_INTO_CGROUP) through SysProcAttr.UseCgroupFD.
//   - v1: there is no such flag, but a v1 group holds threads: the fork runs on an OS
//     thread that is moved into the group for the duration of the fork and moved back
//     afterwards. Should moving it back fail, the thread is never unlocked, so the Go
//     runtime destroys it instead of reusing a thread that sits in a command's group.
func (g *Group) StartCmd(cmd *exec.Cmd) error {
	if g.m.mode == ModeV2 {
		fd, err := unix.Open(g.dir(""), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return fmt.Errorf("cgroups: open %s: %w: %w", g.Path(), ErrUnavailable, err)
		}
		defer unix.Close(fd)
		if cmd.SysProcAttr == nil {
			cmd.SysProcAttr = &syscall.SysProcAttr{}
		}
		cmd.SysProcAttr.UseCgroupFD, cmd.SysProcAttr.CgroupFD = true, fd
		return cmd.Start()
	}
	type result struct{ start, restore error }
	done := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		tid := unix.Gettid()
		orig, err := threadCgroupsV1(tid)
		if err != nil {
			runtime.UnlockOSThread()
			done <- result{start: err}
			return
		}
		var r result
		if r.start = g.moveThreadV1(tid, nil); r.start == nil {
			r.start = cmd.Start()
		} else {
			r.start = fmt.Errorf("%w: %w", ErrUnavailable, r.start)
		}
		r.restore = g.moveThreadV1(tid, orig)
		if r.restore == nil {
			runtime.UnlockOSThread()
		} // else: exit locked, the runtime terminates the thread
		done <- r
	}()
	r := <-done
	if r.restore != nil {
		// The thread is gone; the child (if any) was born in the group as intended.
		r.restore = fmt.Errorf("cgroups: forking thread could not leave %s (thread discarded): %w", g.Path(), r.restore)
	}
	if r.start != nil {
		return errors.Join(fmt.Errorf("cgroups: start in %s: %w", g.Path(), r.start), r.restore)
	}
	return nil
}

// threadCgroupsV1 returns the v1 paths of thread tid for the group's controllers.
func threadCgroupsV1(tid int) (map[Controller]string, error) {
	b, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/cgroup")
	if err != nil {
		return nil, fmt.Errorf("cgroups: read the thread's cgroups: %w", err)
	}
	out := map[Controller]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			out[Controller(c)] = parts[2]
		}
	}
	for _, c := range v1Controllers {
		if _, ok := out[Controller(c)]; !ok {
			return nil, fmt.Errorf("cgroups: the thread is in no %s group: %w", c, ErrUnavailable)
		}
	}
	// /proc/<pid>/cgroup names a group from its hierarchy's root; a container (a node-agent
	// DaemonSet pod) has only its own group mounted at /sys/fs/cgroup/<controller>. Paths
	// are made relative to what is mounted, or the thread could never move back (and a
	// locked main thread — PID 1 in a pod — would stay in the command's or VM's group).
	for c, root := range v1MountRoots() {
		if p, ok := out[c]; ok && root != "/" {
			if rel, found := strings.CutPrefix(p, root); found && (rel == "" || strings.HasPrefix(rel, "/")) {
				out[c] = "/" + strings.TrimPrefix(rel, "/")
			}
		}
	}
	return out, nil
}

// v1MountRoots maps each v1 controller to the path of its hierarchy that is mounted (the
// root field of /proc/self/mountinfo; "/" on a host, the container's group in a pod).
func v1MountRoots() map[Controller]string {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return nil
	}
	out := map[Controller]string{}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 3 || g[0] != "cgroup" {
			continue
		}
		for _, opt := range strings.Split(g[2], ",") {
			for _, c := range v1Controllers {
				if opt == string(c) {
					out[Controller(c)] = f[3]
				}
			}
		}
	}
	return out
}

// moveThreadV1 writes tid into the group's "tasks" (orig nil) or back into orig.
func (g *Group) moveThreadV1(tid int, orig map[Controller]string) error {
	var errs []error
	for _, c := range g.hierarchies() {
		dir := g.dir(c)
		if orig != nil {
			dir = filepath.Join(g.m.root, string(c), orig[c])
		}
		if err := os.WriteFile(filepath.Join(dir, "tasks"), []byte(strconv.Itoa(tid)), 0); err != nil {
			errs = append(errs, fmt.Errorf("move thread %d to %s: %w", tid, dir, err))
		}
	}
	return errors.Join(errs...)
}
