package qemumicrovm

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/platform/procexec"
)

// The VMM sandbox: QEMU and vhost-device-vsock are not exec'd directly. The agent starts
// its own executable (vmmSandboxArg, the configuration in vmmSandboxEnv), cloned into new
// mount, IPC and UTS namespaces (QEMU also PID) inside the VM's cgroup. That helper, still
// host root in a private mount namespace:
//
//  1. clones the read-only system set (/usr, /lib*, /bin, /sbin as the host has them, the
//     loader's /etc files), the program's own binary when it lives elsewhere, and the
//     device files the VMM needs (null, zero, full, random, urandom, and kvm when present);
//  2. mounts a tmpfs over stagingDir as the new root, attaches the clones read-only,
//     nosuid, nodev (devices: nosuid, noexec on a tmpfs /dev with fd -> /proc/self/fd),
//     a fresh proc (hidepid=invisible), makes /dev read-only, pivot_roots into it, detaches the host tree and
//     makes the root read-only: nothing of the agent's state dir, keys, kubeconfig,
//     /root, /home, /var, /run or /sys exists in it. The VM directory, kernel and initrd
//     are reached only through the descriptors the agent passed (vmm.go);
//  3. on the thread that will exec: drops the whole capability bounding set, clears the
//     ambient and inheritable sets, switches to the VMM uid/gid (no supplementary group
//     but /dev/kvm's), which clears the permitted and effective sets, sets no_new_privs
//     (on every cgroup version: it is the helper's own thread that execs), installs
//     procexec.VMMSeccompProgram (Docker's default profile for a process without
//     capabilities, sockets AF_UNIX only; QEMU stacks its own -sandbox filter on it), and
//     execs the program in place (same pid, so the pidfd and the cgroup stay valid).
//
// The helper reports a failure on a close-on-exec pipe (the last ExtraFile) and exits
// 127; the agent reads the pipe to its end, so an empty read means the exec happened.

const (
	vmmSandboxArg  = "--workbench-vmm-sandbox"
	vmmSandboxEnv  = "WORKBENCH_VMM_SANDBOX"
	vmmSandboxFail = 127
	// vmmStagingDir is where the helper assembles the new root (covered by a tmpfs in its
	// private mount namespace; host sources below it are cloned before).
	vmmStagingDir = "/tmp"
	// vmmExecTimeout bounds the wait for the helper's exec.
	vmmExecTimeout = 30 * time.Second
	vmmReportMax   = 4096
)

// Mount kinds of the VMM root.
const (
	vmmBind    = "bind"    // read-only recursive bind of Path at the same path
	vmmDev     = "dev"     // a device file bound at the same path (nosuid, noexec)
	vmmSymlink = "symlink" // a symlink at Path to Link
)

type vmmMount struct {
	Kind string `json:"kind"`
	Path string `json:"path"`
	Link string `json:"link,omitempty"`
	File bool   `json:"file,omitempty"`
}

// vmmSandboxConfig is the helper's whole configuration.
type vmmSandboxConfig struct {
	UID      uint32     `json:"uid"`
	Groups   []uint32   `json:"groups"`
	Mounts   []vmmMount `json:"mounts"`
	NotifyFD int        `json:"notifyFD"`
}

// vmmSystemDirs are bound read-only (a symlink on the host, as on merged-/usr systems, is
// recreated as the same symlink); vmmSystemFiles likewise when present.
var (
	vmmSystemDirs  = []string{"/usr", "/lib", "/lib64", "/lib32", "/libx32", "/bin", "/sbin"}
	vmmSystemFiles = []string{"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d"}
	vmmDevices     = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/kvm"}
)

// vmmMounts is the root of the VMM processes running bins (resolved absolute paths).
func vmmMounts(bins ...string) []vmmMount {
	var ms []vmmMount
	var dirs []string
	for _, p := range vmmSystemDirs {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if l, err := os.Readlink(p); err == nil {
				ms = append(ms, vmmMount{Kind: vmmSymlink, Path: p, Link: l})
			}
		case fi.IsDir():
			ms = append(ms, vmmMount{Kind: vmmBind, Path: p})
			dirs = append(dirs, p)
		}
	}
	for _, p := range vmmSystemFiles {
		if fi, err := os.Stat(p); err == nil {
			ms = append(ms, vmmMount{Kind: vmmBind, Path: p, File: !fi.IsDir()})
		}
	}
	for _, b := range bins {
		if r, err := filepath.EvalSymlinks(b); err == nil {
			b = r
		}
		covered := false
		for _, d := range dirs {
			covered = covered || strings.HasPrefix(b, d+"/")
		}
		if !covered {
			ms = append(ms, vmmMount{Kind: vmmBind, Path: b, File: true})
		}
	}
	for _, d := range vmmDevices {
		if fi, err := os.Stat(d); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			ms = append(ms, vmmMount{Kind: vmmDev, Path: d, File: true})
		}
	}
	return ms
}

// sandboxed rewrites cmd (its Path and Args the VMM program, ExtraFiles its descriptors)
// to start through the VMM sandbox helper as id. It returns the read end of the helper's
// report pipe; the caller passes it to awaitExec after the start.
func (id vmmIdentity) sandboxed(cmd *exec.Cmd, ownPID bool) (*os.File, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("VMM sandbox: locate this executable: %w", err)
	}
	r, w, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("VMM sandbox: report pipe: %w", err)
	}
	cfg := vmmSandboxConfig{UID: id.uid, Groups: id.groups, Mounts: vmmMounts(cmd.Path), NotifyFD: 3 + len(cmd.ExtraFiles)}
	if cfg.Groups == nil {
		cfg.Groups = []uint32{}
	}
	cj, err := json.Marshal(cfg)
	if err != nil {
		_ = r.Close()
		_ = w.Close()
		return nil, fmt.Errorf("VMM sandbox: encode configuration: %w", err)
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, w)
	cmd.Args = append([]string{self, vmmSandboxArg, cmd.Path}, cmd.Args[1:]...)
	cmd.Path = self
	cmd.Env = append(cmd.Env, vmmSandboxEnv+"="+string(cj))
	flags := uintptr(syscall.CLONE_NEWNS | syscall.CLONE_NEWIPC | syscall.CLONE_NEWUTS)
	if ownPID {
		flags |= syscall.CLONE_NEWPID
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Cloneflags: flags}
	return r, nil
}

// awaitExec closes the parent's copy of the write end (the last ExtraFile) and reads the
// helper's report to its end: nothing means the program was exec'd.
func awaitExec(cmd *exec.Cmd, r *os.File) error {
	defer func() { _ = r.Close() }()
	if n := len(cmd.ExtraFiles); n > 0 {
		_ = cmd.ExtraFiles[n-1].Close()
	}
	_ = r.SetReadDeadline(time.Now().Add(vmmExecTimeout))
	b, err := io.ReadAll(io.LimitReader(r, vmmReportMax))
	if err != nil {
		return fmt.Errorf("VMM sandbox: no exec within %v: %w", vmmExecTimeout, err)
	}
	if len(b) > 0 {
		return fmt.Errorf("VMM sandbox: %s", strings.TrimSpace(string(b)))
	}
	return nil
}

func init() {
	if len(os.Args) < 3 || os.Args[1] != vmmSandboxArg || os.Getenv(vmmSandboxEnv) == "" {
		return
	}
	runVMMSandbox()
}

// runVMMSandbox is the helper; it never returns.
func runVMMSandbox() {
	runtime.LockOSThread() // the bounding set, capabilities and no_new_privs are per thread
	var cfg vmmSandboxConfig
	err := json.Unmarshal([]byte(os.Getenv(vmmSandboxEnv)), &cfg)
	report := os.Stderr
	if err == nil {
		if cfg.NotifyFD < 3 {
			err = fmt.Errorf("report descriptor %d", cfg.NotifyFD)
		} else {
			unix.CloseOnExec(cfg.NotifyFD)
			report = os.NewFile(uintptr(cfg.NotifyFD), "vmm-report")
		}
	}
	if err == nil {
		err = vmmBuildRoot(cfg.Mounts)
	}
	if err == nil {
		err = vmmDropPrivileges(cfg)
	}
	if err == nil {
		env := make([]string, 0, len(os.Environ()))
		for _, e := range os.Environ() {
			if !strings.HasPrefix(e, vmmSandboxEnv+"=") {
				env = append(env, e)
			}
		}
		if err = vmmSeccomp(); err == nil {
			err = fmt.Errorf("exec %s: %w", os.Args[2], unix.Exec(os.Args[2], os.Args[2:], env))
		}
	}
	_, _ = fmt.Fprintf(report, "%v\n", err)
	os.Exit(vmmSandboxFail)
}

// vmmBuildRoot assembles the root and pivots into it (see the package comment above).
func vmmBuildRoot(mounts []vmmMount) error {
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("make / private: %w", err)
	}
	clones := make([]int, len(mounts))
	defer func() {
		for _, fd := range clones {
			if fd > 0 {
				_ = unix.Close(fd)
			}
		}
	}()
	for i, m := range mounts {
		var flags uint = unix.OPEN_TREE_CLONE | unix.OPEN_TREE_CLOEXEC
		attr := unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV}
		setFlags := uint(unix.AT_EMPTY_PATH)
		switch m.Kind {
		case vmmBind:
			flags |= unix.AT_RECURSIVE
			setFlags |= unix.AT_RECURSIVE
		case vmmDev:
			attr.Attr_set = unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NOEXEC
		default:
			continue
		}
		fd, err := unix.OpenTree(unix.AT_FDCWD, m.Path, flags)
		if err != nil {
			return fmt.Errorf("open_tree %s: %w", m.Path, err)
		}
		clones[i] = fd
		if err := unix.MountSetattr(fd, "", setFlags, &attr); err != nil {
			return fmt.Errorf("mount_setattr %s: %w", m.Path, err)
		}
	}
	root := vmmStagingDir
	if err := unix.Mount("tmpfs", root, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=0755,size=1m,nr_inodes=4096"); err != nil {
		return fmt.Errorf("mount root tmpfs: %w", err)
	}
	if err := os.Mkdir(filepath.Join(root, "dev"), 0o755); err != nil {
		return err
	}
	if err := unix.Mount("tmpfs", filepath.Join(root, "dev"), "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=0755,size=64k,nr_inodes=64"); err != nil {
		return fmt.Errorf("mount /dev tmpfs: %w", err)
	}
	if err := os.Symlink("/proc/self/fd", filepath.Join(root, "dev", "fd")); err != nil {
		return err
	}
	// Directories created only to reach a bound binary become traverse-only.
	var skeleton []string
	for i, m := range mounts {
		target := filepath.Join(root, m.Path)
		for d := filepath.Dir(target); len(d) > len(root) && m.Kind == vmmBind; d = filepath.Dir(d) {
			if _, err := os.Lstat(d); err != nil {
				skeleton = append(skeleton, d)
			}
		}
		if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
			return err
		}
		switch {
		case m.Kind == vmmSymlink:
			if err := os.Symlink(m.Link, target); err != nil {
				return fmt.Errorf("symlink %s: %w", m.Path, err)
			}
			continue
		case m.File:
			f, err := os.OpenFile(target, os.O_CREATE|os.O_WRONLY, 0o644)
			if err != nil {
				return err
			}
			_ = f.Close()
		default:
			if err := os.Mkdir(target, 0o755); err != nil {
				return err
			}
		}
		if err := unix.MoveMount(clones[i], "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH); err != nil {
			return fmt.Errorf("move_mount %s: %w", m.Path, err)
		}
	}
	procDir := filepath.Join(root, "proc")
	if err := os.Mkdir(procDir, 0o555); err != nil {
		return err
	}
	const procFlags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("proc", procDir, "proc", procFlags, "hidepid=invisible"); err != nil {
		if err := unix.Mount("proc", procDir, "proc", procFlags, ""); err != nil {
			return fmt.Errorf("mount proc: %w", err)
		}
	}
	for _, d := range skeleton {
		if err := os.Chmod(d, 0o111); err != nil {
			return err
		}
	}
	if err := unix.MountSetattr(unix.AT_FDCWD, filepath.Join(root, "dev"), 0, &unix.MountAttr{Attr_set: unix.MOUNT_ATTR_RDONLY}); err != nil {
		return fmt.Errorf("make /dev read-only: %w", err)
	}
	return procexec.PivotReadOnly(root)
}

// vmmSeccomp installs procexec.VMMSeccompProgram on this thread (no_new_privs is set).
func vmmSeccomp() error {
	prog, err := procexec.VMMSeccompProgram()
	if err != nil {
		return err
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	if err := unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0); err != nil {
		return fmt.Errorf("install the seccomp filter: %w", err)
	}
	return nil
}

// vmmDropPrivileges leaves this thread with no capability, the VMM identity and
// no_new_privs.
func vmmDropPrivileges(cfg vmmSandboxConfig) error {
	for c := 0; c <= 63; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			if errors.Is(err, unix.EINVAL) {
				break // past the kernel's last capability
			}
			return fmt.Errorf("drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capget: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("clear inheritable capabilities: %w", err)
	}
	groups := make([]int, len(cfg.Groups))
	for i, g := range cfg.Groups {
		groups[i] = int(g)
	}
	if err := syscall.Setgroups(groups); err != nil {
		return fmt.Errorf("setgroups: %w", err)
	}
	if err := syscall.Setresgid(int(cfg.UID), int(cfg.UID), int(cfg.UID)); err != nil {
		return fmt.Errorf("setresgid %d: %w", cfg.UID, err)
	}
	if err := syscall.Setresuid(int(cfg.UID), int(cfg.UID), int(cfg.UID)); err != nil {
		return fmt.Errorf("setresuid %d: %w", cfg.UID, err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	return nil
}
