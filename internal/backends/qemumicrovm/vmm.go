package qemumicrovm

import (
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// The confinement profile of QEMU and vhost-device-vsock (the VMM processes):
//
//   - started through the VMM sandbox helper (vmmsandbox.go): a private mount namespace
//     whose root holds only the read-only system set, the program's binary and the device
//     files the VMM needs; no capability (bounding set dropped), an unprivileged uid/gid
//     (Config.VMMUID, default DefaultVMMUID, owned by no account) with no supplementary
//     group but /dev/kvm's when it grants the group read-write, and no_new_privs on every
//     cgroup version;
//   - their own IPC and UTS namespaces, and QEMU its own PID namespace (it forks nothing
//     with spawn=deny; vhost-device-vsock stays in the host's, as PID 1 would drop the
//     agent's SIGTERM; its /proc hides other users' processes);
//   - QEMU's own seccomp sandbox: -sandbox on,obsolete=deny,elevateprivileges=deny,
//     spawn=deny,resourcecontrol=deny (qemuArgs);
//   - file access through descriptors: the kernel and initrd (fds 3, 4), the VM directory
//     (a descriptor; /proc/self/fd/N/<name> paths), so nothing above it must be reachable;
//     the directory is root:<vmm gid> 01770 (the VMM creates its sockets, cannot replace the
//     agent's files), the binding and the agent's listeners are root:<vmm gid> 0440/0660.
//     The guest memory is a memfd QEMU creates itself;
//   - a cgroup per VM (cgroup.go), which the helper is born in (cgroups.Group.StartCmd).

// DefaultVMMUID is the host uid/gid of the VMM processes when Config.VMMUID is 0.
const DefaultVMMUID = 2147000001

// vmDirEnv names the VM directory in the VMM processes' environment (scanOwned).
const vmDirEnv = "WORKBENCH_VM_DIR"

type vmmIdentity struct {
	uid    uint32
	groups []uint32
}

func (b *Backend) vmmIdentity() vmmIdentity {
	id := vmmIdentity{uid: b.cfg.VMMUID}
	if id.uid == 0 {
		id.uid = DefaultVMMUID
	}
	var st unix.Stat_t
	if err := unix.Stat("/dev/kvm", &st); err == nil && st.Mode&0o060 == 0o060 && st.Gid != 0 {
		id.groups = []uint32{st.Gid}
	}
	return id
}

// shareWithVMM gives the VMM's group access to dir (when not empty, with dirMode) and to
// the named files (beneath dir when relative): group read for regular files, read-write
// for sockets.
func shareWithVMM(dir string, id vmmIdentity, dirMode os.FileMode, names ...string) error {
	if dir != "" {
		if err := os.Chown(dir, 0, int(id.uid)); err != nil {
			return fmt.Errorf("share %s with the VMM: %w", dir, err)
		}
		if err := unix.Chmod(dir, uint32(dirMode)); err != nil { // raw mode: 01770 keeps its sticky bit
			return fmt.Errorf("share %s with the VMM: %w", dir, err)
		}
	}
	for _, n := range names {
		p := n
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, n)
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return fmt.Errorf("share %s with the VMM: %w", p, err)
		}
		mode := os.FileMode(0o440)
		if fi.Mode()&os.ModeSocket != 0 {
			mode = 0o660
		}
		if err := os.Lchown(p, 0, int(id.uid)); err != nil {
			return fmt.Errorf("share %s with the VMM: %w", p, err)
		}
		if err := os.Chmod(p, mode); err != nil {
			return fmt.Errorf("share %s with the VMM: %w", p, err)
		}
	}
	return nil
}
