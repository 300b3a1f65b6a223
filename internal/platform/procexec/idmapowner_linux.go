//go:build linux

package procexec

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
)

// Ownership of what a command creates on a root (issue 25 item 1, defence in depth).
//
// A root is attached through an idmapped mount. With the helper's own user namespace as
// the mount's map (uid/gid 0 of the sandbox = host DefaultSandboxUID), on-disk uid/gid 0
// appear as the sandbox's root and what the sandbox creates is stored as host uid/gid 0.
// That is kept for a directory owned by root (managed copies, the private tmp, roots the
// agent created). A directory owned by anyone else — an operator's checkout — is attached
// with a map that sends its on-disk owner (uid O, gid G) to the sandbox's host uid
// instead: the owner's files appear owned by the sandbox's root, and what the command
// creates is stored as O:G, never as host root. Files of other owners below it (host root
// included) appear unmapped (the overflow id) and keep only their "other" permissions.
//
// The map comes from a user namespace created for the purpose (no process keeps running
// in it: its descriptor keeps it alive), cached per (O, G, host uid) and bounded.

// maxOwnerNamespaces bounds the cache of owner user namespaces; past it the oldest entry
// is closed (mounts already made keep their namespace alive themselves).
const maxOwnerNamespaces = 64

type ownerKey struct{ uid, gid, host uint32 }

var ownerNS struct {
	sync.Mutex
	fds   map[ownerKey]int
	order []ownerKey
}

// ownerUserns returns a new descriptor (the caller closes it) of a user namespace whose
// uid map is "uid host 1" and gid map "gid host 1".
func ownerUserns(uid, gid, host uint32) (int, error) {
	k := ownerKey{uid, gid, host}
	ownerNS.Lock()
	defer ownerNS.Unlock()
	fd, ok := ownerNS.fds[k]
	if !ok {
		var err error
		if fd, err = newOwnerUserns(uid, gid, host); err != nil {
			return -1, err
		}
		if ownerNS.fds == nil {
			ownerNS.fds = map[ownerKey]int{}
		}
		if len(ownerNS.order) >= maxOwnerNamespaces {
			old := ownerNS.order[0]
			ownerNS.order = ownerNS.order[1:]
			unix.Close(ownerNS.fds[old])
			delete(ownerNS.fds, old)
		}
		ownerNS.fds[k] = fd
		ownerNS.order = append(ownerNS.order, k)
	}
	dup, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("dup the owner user namespace: %w", err)
	}
	return dup, nil
}

// newOwnerUserns creates the user namespace: a child is cloned into it with the maps
// written by this (privileged) process, stopped by ptrace at its exec before any of its
// code runs, and killed once its namespace is open.
func newOwnerUserns(uid, gid, host uint32) (int, error) {
	cmd := &exec.Cmd{
		Path: "/proc/self/exe",
		Args: []string{"workbench-idmap-userns"},
		Env:  []string{},
		Dir:  "/",
		SysProcAttr: &syscall.SysProcAttr{
			Cloneflags:  syscall.CLONE_NEWUSER,
			UidMappings: []syscall.SysProcIDMap{{ContainerID: int(uid), HostID: int(host), Size: 1}},
			GidMappings: []syscall.SysProcIDMap{{ContainerID: int(gid), HostID: int(host), Size: 1}},
			Ptrace:      true, // stops at the exec: nothing of the program runs
			Pdeathsig:   syscall.SIGKILL,
		},
	}
	if err := cmd.Start(); err != nil {
		return -1, fmt.Errorf("create a user namespace mapping %d:%d to %d: %w", uid, gid, host, err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_, _ = cmd.Process.Wait()
	}()
	fd, err := unix.Open("/proc/"+strconv.Itoa(cmd.Process.Pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, fmt.Errorf("open the user namespace mapping %d:%d: %w", uid, gid, err)
	}
	return fd, nil
}

// helperHostUID is the host uid the sandbox's uid 0 maps to (the helper's uid_map).
func helperHostUID(pid int) (uint32, error) {
	f, err := os.Open("/proc/" + strconv.Itoa(pid) + "/uid_map")
	if err != nil {
		return 0, err
	}
	defer func() { _ = f.Close() }()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fs := strings.Fields(sc.Text())
		if len(fs) == 3 && fs[0] == "0" {
			h, err := strconv.ParseUint(fs[1], 10, 32)
			return uint32(h), err
		}
	}
	return 0, fmt.Errorf("no mapping of uid 0 in the helper's uid_map")
}

// mountUserns picks the idmap of the detached mount fd: the helper's namespace (usernsFD)
// for anything but a directory owned by another uid or gid than 0, else an owner
// namespace. The returned closer releases what it opened.
func mountUserns(fd, usernsFD, pid int, hostUID *uint32) (int, func(), error) {
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return -1, nil, actuation.Refusef(actuation.CodeIdmapUnavailable, "stat a root's mount: %v", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || (st.Uid == 0 && st.Gid == 0) {
		return usernsFD, func() {}, nil
	}
	if *hostUID == 0 {
		h, err := helperHostUID(pid)
		if err != nil {
			return -1, nil, actuation.Refusef(actuation.CodeUserNamespaceUnavailable, "read the sandbox's uid map: %v", err)
		}
		*hostUID = h
	}
	ns, err := ownerUserns(st.Uid, st.Gid, *hostUID)
	if err != nil {
		return -1, nil, actuation.Refusef(actuation.CodeIdmapUnavailable, "a root owned by %d:%d: %v", st.Uid, st.Gid, err)
	}
	return ns, func() { unix.Close(ns) }, nil
}
