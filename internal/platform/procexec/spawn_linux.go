//go:build linux

package procexec

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/platform/procexec/sandboxhelper"
)

// DefaultSandboxUID is the host uid (and gid) that uid 0 of a sandbox's user
// namespace maps to: owned by no account, holding no capability on the host.
const DefaultSandboxUID = 2147000000

// SandboxTmp is where a sandbox sees its private temp dir.
const SandboxTmp = "/tmp"

// SandboxHostname is the hostname inside every sandbox (its own UTS namespace).
const SandboxHostname = "workbench-sandbox"

// System paths of the sandbox root, read-only (those missing on the host are
// skipped; host symlinks such as /bin -> usr/bin are reproduced as symlinks).
var (
	systemDirs = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}
	systemEtc  = []string{
		"/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/timezone",
		"/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/hosts", "/etc/host.conf",
		"/etc/protocols", "/etc/services", "/etc/os-release", "/etc/alternatives", "/etc/ssl",
		"/etc/ca-certificates", "/etc/mime.types", "/etc/inputrc", "/etc/bash.bashrc", "/etc/profile",
		"/etc/terminfo", "/etc/gitconfig", "/etc/environment", "/etc/locale.alias", "/etc/magic",
	}
	devFiles = []string{"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"}
)

// ValidateMounts checks extra sandbox mounts (refusal.InvalidSpec).
func ValidateMounts(ms []Mount) error {
	if len(ms) > MaxMounts {
		return actuation.Refusef(actuation.CodeInvalidSpec, "%d mounts exceed the cap %d", len(ms), MaxMounts)
	}
	for _, m := range ms {
		if !filepath.IsAbs(m.Source) || !filepath.IsAbs(m.Target) || filepath.Clean(m.Target) != m.Target || m.Target == "/" || m.Target == SandboxTmp {
			return actuation.Refusef(actuation.CodeInvalidSpec, "mount %q -> %q: source and target must be clean absolute paths (not / or %s)", m.Source, m.Target, SandboxTmp)
		}
		for _, p := range reservedPaths {
			if under(m.Target, []string{p}) || under(p, []string{m.Target}) {
				return actuation.Refusef(actuation.CodeInvalidSpec, "mount target %q overlaps the sandbox's system path %s", m.Target, p)
			}
		}
		fi, err := os.Stat(m.Source)
		if err != nil {
			return actuation.Refusef(actuation.CodeInvalidSpec, "mount source: %v", err)
		}
		if !fi.IsDir() && !fi.Mode().IsRegular() {
			return actuation.Refusef(actuation.CodeInvalidSpec, "mount source %q is neither a directory nor a regular file", m.Source)
		}
		if m.Writable && !fi.IsDir() {
			return actuation.Refusef(actuation.CodeInvalidSpec, "writable mount source %q is not a directory", m.Source)
		}
	}
	return nil
}

// StartOptions are the parent-side settings of one sandbox.
type StartOptions struct {
	// HelperPath is the helper binary (absolute); empty selects os.Executable.
	HelperPath string
	// UID is the host uid/gid of the sandbox's root (0 selects DefaultSandboxUID).
	UID uint32
	// Stdin, Stdout and Stderr are the program's standard descriptors.
	Stdin, Stdout, Stderr *os.File
	// Terminal makes the helper a session leader with Stdin as its
	// controlling terminal (PTY programs); otherwise it leads a new process
	// group.
	Terminal bool
	// BeforeConfig runs after the helper is started and before it receives
	// its configuration (the helper does nothing before that): e.g. to move
	// it into a cgroup. An error aborts the start (the helper is killed).
	BeforeConfig func(pid int) error
	// BeforeExec, when set, runs once the helper has set up every isolation layer and
	// right before it execs the program: the program runs only if it returns nil (an
	// error aborts the start, the helper is killed, and the start returns that error).
	// Work the program must wait for (a durable start record) overlaps the set-up.
	BeforeExec func() error
}

// Sandboxed is a started sandbox whose program has been exec'd. Pid is the
// helper (PID 1 of the sandbox, leader of its process group or session).
type Sandboxed struct {
	// Process is the helper, a child of the caller (re-parented to it when a spawner
	// cloned it: startHelper).
	Process *os.Process
	Pid     int
	status  *os.File
	br      *bufio.Reader

	endOnce sync.Once
	end     helperStatus
	ended   bool
}

// ExitStatus describes how the sandboxed program ended given the helper's
// wait status: the program's own exit code or signal as the helper reported
// it, or the helper's status when it was killed before it could report.
func (s *Sandboxed) ExitStatus(ws unix.WaitStatus) (int, string) {
	if end, ok := s.End(); ok {
		if end.Signal != 0 {
			return -1, unix.SignalName(syscall.Signal(end.Signal))
		}
		return end.Exit, ""
	}
	return ExitDescription(ws)
}

// End returns the helper's final report once it has exited (read once; ok is
// false when it was killed before it could report).
func (s *Sandboxed) End() (helperStatus, bool) {
	s.endOnce.Do(func() {
		if s.status == nil {
			return
		}
		_ = s.status.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		for {
			st, _, err := readStatusLine(s.br)
			if err != nil {
				return
			}
			if st.Exited {
				s.end, s.ended = st, true
				return
			}
		}
	})
	return s.end, s.ended
}

// Leftovers reports the processes the helper found alive in the sandbox when
// the program ended (all killed with the PID namespace): their count and the
// first few (pids inside the sandbox).
func (s *Sandboxed) Leftovers() (int, []LeftProc) {
	end, _ := s.End()
	return end.Left, end.LeftProcs
}

// Close releases the status pipe.
func (s *Sandboxed) Close() {
	if s.status != nil {
		_ = s.status.Close()
	}
}

// StartSandboxed starts spec in a new sandbox and returns once the program
// has been exec'd or the sandbox refused (a *actuation.Refusal, or an exec
// error wrapping the errno).
func StartSandboxed(spec SandboxSpec, opts StartOptions) (*Sandboxed, error) {
	cfg, idmaps, err := prepareSandbox(spec)
	if err != nil {
		return nil, err
	}
	hp, err := startHelper(opts)
	if err != nil {
		return nil, err
	}
	return hp.configure(cfg, idmaps, opts.BeforeConfig, opts.BeforeExec)
}

// prepareSandbox checks the kernel primitives every sandbox needs and lays out spec's
// configuration (nothing is started).
func prepareSandbox(spec SandboxSpec) (*helperConfig, []idmapSource, error) {
	abi, err := landlockABI()
	if err != nil || abi < MinLandlockABI {
		return nil, nil, actuation.Refusef(actuation.CodeLandlockUnavailable,
			"kernel Landlock ABI %d (err %v) is below the required %d; refusing to run without write confinement", abi, err, MinLandlockABI)
	}
	hostNS, err := netnsInode()
	if err != nil {
		return nil, nil, actuation.Refusef(actuation.CodeEgressForbidden, "cannot identify the host network namespace: %v", err)
	}
	prog, err := seccompProgram()
	if err != nil {
		return nil, nil, actuation.Refusef(actuation.CodeSeccompUnavailable, "cannot build the seccomp filter: %v", err)
	}
	lastCap, err := capLastCap()
	if err != nil {
		return nil, nil, actuation.Refusef(actuation.CodeSandboxSetupFailed, "%v", err)
	}
	cfg, idmaps, err := sandboxConfig(spec)
	if err != nil {
		return nil, nil, err
	}
	cfg.Seccomp, cfg.HostNetNS, cfg.LandlockABI, cfg.CapLastCap, cfg.Hostname = prog, hostNS, abi, lastCap, SandboxHostname
	return cfg, idmaps, nil
}

// helperProc is a sandbox helper started in its namespaces and waiting for its
// configuration on fd 3: it has done nothing else yet.
type helperProc struct {
	proc      *os.Process
	pid       int
	cfgParent int // the parent's end of the configuration socket
	statusR   *os.File
}

// startHelper starts the helper in new user, mount, PID, UTS, IPC and network namespaces;
// it then waits for its configuration (configure). When the caller is a child subreaper
// (the node agent is), a spawner clones the helper (sandboxhelper/spawn_linux.go): the
// caller itself then clones only with CLONE_VM|CLONE_VFORK, whatever its size. Otherwise
// the caller clones the helper itself, with the full fork a new user namespace needs.
func startHelper(opts StartOptions) (*helperProc, error) {
	var err error
	helper := opts.HelperPath
	if helper == "" {
		if helper, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("procexec: locate the sandbox helper: %w", err)
		}
	}
	uid := opts.UID
	if uid == 0 {
		uid = DefaultSandboxUID
	}
	exe, err := os.Open(helper)
	if err != nil {
		return nil, fmt.Errorf("procexec: open the sandbox helper %s: %w", helper, err)
	}
	defer func() { _ = exe.Close() }()
	sp, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("procexec: config socket: %w", err)
	}
	cfgChild := os.NewFile(uintptr(sp[1]), "procexec-config")
	cfgParent := sp[0]
	statusR, statusW, err := os.Pipe()
	if err != nil {
		_ = cfgChild.Close()
		unix.Close(cfgParent)
		return nil, fmt.Errorf("procexec: status pipe: %w", err)
	}
	cmd := &exec.Cmd{
		// Exec through the descriptor: the helper's directory need not be
		// reachable by the sandbox uid (test binaries live in 0700 dirs).
		Path:       "/proc/self/fd/" + strconv.Itoa(helperExecFD),
		Env:        []string{helperEnvKey + "=" + helperEnvValue},
		Dir:        "/",
		Stdin:      opts.Stdin,
		Stdout:     opts.Stdout,
		Stderr:     opts.Stderr,
		ExtraFiles: []*os.File{cfgChild, statusW, exe},
	}
	var proc *os.Process
	if isSubreaper() {
		proc, err = spawnHelper(cmd, helper, uid, opts.Terminal)
	} else {
		proc, err = cloneHelper(cmd, helper, uid, opts.Terminal)
	}
	_ = cfgChild.Close()
	_ = statusW.Close()
	if err != nil {
		_ = statusR.Close()
		unix.Close(cfgParent)
		return nil, err
	}
	return &helperProc{proc: proc, pid: proc.Pid, cfgParent: cfgParent, statusR: statusR}, nil
}

// cloneHelper clones the helper into its namespaces from this process (a full fork).
func cloneHelper(cmd *exec.Cmd, helper string, uid uint32, terminal bool) (*os.Process, error) {
	cmd.Args, cmd.SysProcAttr = []string{helper, HelperArg}, sandboxhelper.NamespaceAttr(int(uid), terminal)
	if err := cmd.Start(); err != nil {
		return nil, namespaceRefusal(err)
	}
	return cmd.Process, nil
}

// spawnHelper starts the spawner (cheaply: no new namespace, so a vfork), reads the pid of
// the helper it cloned, and reaps it: the helper, orphaned, is then this subreaper's child.
func spawnHelper(cmd *exec.Cmd, helper string, uid uint32, terminal bool) (*os.Process, error) {
	reportR, reportW, err := os.Pipe()
	if err != nil {
		return nil, fmt.Errorf("procexec: spawner report pipe: %w", err)
	}
	defer func() { _ = reportR.Close() }()
	mode := sandboxhelper.SpawnGroup
	if terminal {
		mode = sandboxhelper.SpawnTerminal
	}
	cmd.Args = []string{helper, sandboxhelper.SpawnArg, strconv.FormatUint(uint64(uid), 10), mode}
	cmd.ExtraFiles = append(cmd.ExtraFiles, reportW)
	startErr := cmd.Start()
	_ = reportW.Close()
	if startErr != nil {
		return nil, fmt.Errorf("procexec: start the sandbox spawner: %w", startErr)
	}
	_ = reportR.SetReadDeadline(time.Now().Add(HelperStartTimeout))
	raw, readErr := io.ReadAll(io.LimitReader(reportR, sandboxhelper.MaxSpawnReport))
	if readErr != nil {
		_ = cmd.Process.Kill()
	}
	_ = cmd.Wait() // the spawner exits once it has reported: its helper is ours from here
	var n int
	switch report := strings.TrimSpace(string(raw)); {
	case readErr != nil:
		return nil, actuation.Refusef(actuation.CodeSandboxSetupFailed, "the sandbox spawner did not report: %v", readErr)
	case scanReport(report, "pid ", &n) && n > 0:
		proc, err := os.FindProcess(n)
		if err != nil {
			return nil, fmt.Errorf("procexec: the sandbox helper %d: %w", n, err)
		}
		return proc, nil
	case scanReport(report, "errno ", &n):
		return nil, namespaceRefusal(&os.SyscallError{Syscall: "clone", Err: syscall.Errno(n)})
	default: // not the helper this agent ships (or it crashed): nothing was set up
		return nil, actuation.Refusef(actuation.CodeSandboxSetupFailed, "the sandbox spawner ended without a report (%q, %v)", report, cmd.ProcessState)
	}
}

// scanReport parses "<prefix><int>".
func scanReport(report, prefix string, n *int) bool {
	v, ok := strings.CutPrefix(report, prefix)
	if !ok {
		return false
	}
	var err error
	*n, err = strconv.Atoi(v)
	return err == nil
}

// namespaceRefusal maps a failed clone into the sandbox's namespaces to its refusal.
func namespaceRefusal(err error) error {
	if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) ||
		errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EUSERS) || errors.Is(err, syscall.EACCES) {
		return actuation.Refusef(actuation.CodeUserNamespaceUnavailable,
			"cannot create the sandbox's user, PID, mount and network namespaces (%v); refusing to run unconfined", err)
	}
	return fmt.Errorf("procexec: start sandbox helper: %w", err)
}

// isSubreaper reports whether this process is a child subreaper (EnableSubreaper): only then
// does a helper orphaned by its spawner come back to it.
func isSubreaper() bool {
	var v int32
	if err := unix.Prctl(unix.PR_GET_CHILD_SUBREAPER, uintptr(unsafe.Pointer(&v)), 0, 0, 0); err != nil {
		return false
	}
	return v != 0
}

// discard kills a helper that will not be configured and reaps it.
func (hp *helperProc) discard() {
	_ = hp.proc.Kill()
	_, _ = hp.proc.Wait()
	_ = hp.statusR.Close()
	unix.Close(hp.cfgParent)
}

// configure runs before (e.g. placing the helper in its cgroup), attaches the idmapped
// roots, sends the configuration and returns once the program has been exec'd or the
// sandbox refused. With beforeExec the helper waits, set up, until beforeExec returns nil.
// The helper is discarded on any failure.
func (hp *helperProc) configure(cfg *helperConfig, idmaps []idmapSource, before func(pid int) error, beforeExec func() error) (*Sandboxed, error) {
	proc, pid, cfgParent, statusR := hp.proc, hp.pid, hp.cfgParent, hp.statusR
	defer unix.Close(cfgParent)
	sb := &Sandboxed{Process: proc, Pid: pid, status: statusR, br: bufio.NewReaderSize(statusR, 4096)}
	abort := func(err error) (*Sandboxed, error) {
		_ = proc.Kill()
		_, _ = proc.Wait()
		_ = statusR.Close()
		return nil, err
	}

	if before != nil {
		if err := before(pid); err != nil {
			return abort(err)
		}
	}
	fds, err := idmappedMounts(pid, idmaps)
	defer func() {
		for _, fd := range fds {
			unix.Close(fd)
		}
	}()
	if err != nil {
		return abort(err)
	}
	cfg.AwaitGo = beforeExec != nil
	raw, err := json.Marshal(cfg)
	if err != nil {
		return abort(fmt.Errorf("procexec: encode sandbox config: %w", err))
	}
	var hdr [8]byte
	binary.LittleEndian.PutUint32(hdr[:4], uint32(len(raw)))
	binary.LittleEndian.PutUint32(hdr[4:], uint32(len(fds)))
	var rights []byte
	if len(fds) > 0 {
		rights = unix.UnixRights(fds...)
	}
	if err := unix.Sendmsg(cfgParent, hdr[:], rights, nil, 0); err != nil {
		return abort(actuation.Refusef(actuation.CodeSandboxSetupFailed, "send sandbox config (the helper ended before its setup): %v", err))
	}
	for off := 0; off < len(raw); {
		n, err := unix.Write(cfgParent, raw[off:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return abort(actuation.Refusef(actuation.CodeSandboxSetupFailed, "send sandbox config (the helper ended before its setup): %v", err))
		}
		off += n
	}

	_ = statusR.SetReadDeadline(time.Now().Add(HelperStartTimeout))
	st, line, rerr := readStatusLine(sb.br)
	_ = statusR.SetReadDeadline(time.Time{})
	if rerr == nil && st.Ready && beforeExec != nil {
		if err := beforeExec(); err != nil {
			return abort(err)
		}
		if _, err := unix.Write(cfgParent, []byte{goByte}); err != nil {
			return abort(actuation.Refusef(actuation.CodeSandboxSetupFailed, "confirm the sandbox start (the helper ended): %v", err))
		}
		_ = statusR.SetReadDeadline(time.Now().Add(HelperStartTimeout))
		st, line, rerr = readStatusLine(sb.br)
		_ = statusR.SetReadDeadline(time.Time{})
	}
	switch {
	case rerr == nil && st.Started:
		return sb, nil
	case rerr == nil && st.Code == string(actuation.CodeExecFailed):
		if st.Errno != 0 {
			return abort(fmt.Errorf("procexec: %s: %w", st.Message, syscall.Errno(st.Errno)))
		}
		return abort(fmt.Errorf("procexec: %s", st.Message))
	case rerr == nil && st.Code != "":
		return abort(actuation.Refusef(actuation.Code(st.Code), "%s", st.Message))
	default:
		return abort(actuation.Refusef(actuation.CodeSandboxSetupFailed, "sandbox helper handshake failed: %v (%q)", rerr, line))
	}
}

// idmapSource is a host directory attached inside through an idmapped mount.
type idmapSource struct {
	path     string
	readOnly bool
	// noSymlinks: an environment's root, pinned by the agent with no symlink on its path
	// (fsaccess.PinRoot); it is cloned through a descriptor opened the same way, so a root
	// swapped for a symlink can never redirect the sandbox's mount (root-changed).
	noSymlinks bool
}

// idmappedMounts clones each source (non-recursively: nothing mounted below a
// root comes along) as a detached mount idmapped with the helper's user
// namespace, so files owned by host uid/gid 0 appear owned by the sandbox's
// root and what it creates is stored as 0, while it holds no host privilege.
// A directory owned by another uid/gid is idmapped to its owner instead
// (mountUserns, idmapowner.go): what the sandbox creates there is stored as
// that owner.
func idmappedMounts(pid int, srcs []idmapSource) ([]int, error) {
	if len(srcs) == 0 {
		return nil, nil
	}
	userns, err := unix.Open("/proc/"+strconv.Itoa(pid)+"/ns/user", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, actuation.Refusef(actuation.CodeUserNamespaceUnavailable, "open the sandbox's user namespace: %v", err)
	}
	defer unix.Close(userns)
	var hostUID uint32 // read from the helper's uid_map when first needed
	fds := make([]int, 0, len(srcs))
	for _, s := range srcs {
		var fd int
		var err error
		if s.noSymlinks {
			fd, err = cloneNoSymlinks(s.path)
			if err != nil {
				return fds, err
			}
		} else {
			fd, err = unix.OpenTree(unix.AT_FDCWD, s.path, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		}
		if err != nil {
			return fds, actuation.Refusef(actuation.CodeIdmapUnavailable, "clone %s for an idmapped mount: %v", s.path, err)
		}
		fds = append(fds, fd)
		ns, release, err := mountUserns(fd, userns, pid, &hostUID)
		if err != nil {
			return fds, err
		}
		attr := unix.MountAttr{
			Attr_set:  unix.MOUNT_ATTR_IDMAP | unix.MOUNT_ATTR_NOSUID | unix.MOUNT_ATTR_NODEV,
			Userns_fd: uint64(ns),
		}
		if s.readOnly {
			attr.Attr_set |= unix.MOUNT_ATTR_RDONLY
		}
		err = unix.MountSetattr(fd, "", unix.AT_EMPTY_PATH, &attr)
		release()
		if err != nil {
			return fds, actuation.Refusef(actuation.CodeIdmapUnavailable, "idmap %s (the kernel or filesystem lacks idmapped mounts): %v", s.path, err)
		}
	}
	return fds, nil
}

// cloneNoSymlinks clones the directory dir names with no symlink on the way
// (RESOLVE_NO_SYMLINKS from "/", as fsaccess.PinRoot opens roots).
func cloneNoSymlinks(dir string) (int, error) {
	how := unix.OpenHow{Flags: uint64(unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC), Resolve: unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS}
	var pfd int
	var err error
	for i := 0; i < 8; i++ {
		if pfd, err = unix.Openat2(unix.AT_FDCWD, dir, &how); err != unix.EAGAIN && err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return -1, actuation.Refusef(actuation.CodeRootChanged, "root %s no longer resolves without a symlink: %v", dir, err)
	}
	defer func() { _ = unix.Close(pfd) }()
	fd, err := unix.OpenTree(pfd, "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return -1, actuation.Refusef(actuation.CodeIdmapUnavailable, "clone %s for an idmapped mount: %v", dir, err)
	}
	return fd, nil
}

// sandboxConfig lays out the sandbox root for spec.
func sandboxConfig(spec SandboxSpec) (*helperConfig, []idmapSource, error) {
	cfg := &helperConfig{Argv: spec.Argv, Env: spec.Env}
	var idmaps []idmapSource
	var mounts []mountSpec
	covered := []string{} // host real paths visible inside at the same path
	addFD := func(target, src string, ro bool) {
		mounts = append(mounts, mountSpec{Kind: mountFD, Target: target, FD: len(idmaps)})
		idmaps = append(idmaps, idmapSource{path: src, readOnly: ro})
	}
	for _, d := range systemDirs {
		fi, err := os.Lstat(d)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			link, err := os.Readlink(d)
			if err != nil {
				return nil, nil, fmt.Errorf("procexec: readlink %s: %w", d, err)
			}
			mounts = append(mounts, mountSpec{Kind: mountSymlink, Target: d, Link: link})
		case fi.IsDir():
			mounts = append(mounts, mountSpec{Kind: mountBind, Target: d, Source: d})
			covered = append(covered, d)
		}
	}
	for _, p := range systemEtc {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
			continue
		case fi.Mode()&os.ModeSymlink != 0:
			link, err := os.Readlink(p)
			if err != nil {
				continue
			}
			mounts = append(mounts, mountSpec{Kind: mountSymlink, Target: p, Link: link})
		case fi.IsDir() || fi.Mode().IsRegular():
			mounts = append(mounts, mountSpec{Kind: mountBind, Target: p, Source: p, File: !fi.IsDir()})
		}
	}
	mounts = append(mounts,
		mountSpec{Kind: mountTmpfs, Target: "/dev", Data: "mode=0755,size=64k,nr_inodes=64"},
		mountSpec{Kind: mountTmpfs, Target: "/dev/shm", Data: "mode=1777,size=64m"},
		mountSpec{Kind: mountSymlink, Target: "/dev/fd", Link: "/proc/self/fd"},
		mountSpec{Kind: mountSymlink, Target: "/dev/stdin", Link: "/proc/self/fd/0"},
		mountSpec{Kind: mountSymlink, Target: "/dev/stdout", Link: "/proc/self/fd/1"},
		mountSpec{Kind: mountSymlink, Target: "/dev/stderr", Link: "/proc/self/fd/2"},
		mountSpec{Kind: mountProc, Target: "/proc"},
	)
	for _, d := range devFiles {
		if _, err := os.Stat(d); err == nil {
			mounts = append(mounts, mountSpec{Kind: mountDevBind, Target: d, Source: d, File: true})
			cfg.WritableFiles = append(cfg.WritableFiles, d)
		}
	}
	if spec.TTY != "" {
		if filepath.Dir(spec.TTY) != "/dev/pts" {
			return nil, nil, actuation.Refusef(actuation.CodeInvalidSpec, "terminal %q is not a /dev/pts device", spec.TTY)
		}
		mounts = append(mounts,
			mountSpec{Kind: mountTmpfs, Target: "/dev/pts", Data: "mode=0755,size=4k,nr_inodes=8"},
			mountSpec{Kind: mountDevBind, Target: spec.TTY, Source: spec.TTY, File: true})
		cfg.WritableFiles = append(cfg.WritableFiles, spec.TTY)
	}
	if spec.TempDir == "" {
		return nil, nil, errors.New("procexec: sandbox without a private temp dir")
	}
	tmp, err := tmpMount(spec.TempBytes) // a size-bounded tmpfs, not the host dir (tmpbound.go)
	if err != nil {
		return nil, nil, err
	}
	mounts = append(mounts, tmp)
	cfg.WritablePaths = append(cfg.WritablePaths, SandboxTmp)
	for _, r := range spec.WritableRoots {
		addFD(r, r, false)
		idmaps[len(idmaps)-1].noSymlinks = true
		cfg.WritablePaths = append(cfg.WritablePaths, r)
		covered = append(covered, r)
	}
	for _, r := range spec.ReadableRoots {
		addFD(r, r, true)
		idmaps[len(idmaps)-1].noSymlinks = true
		covered = append(covered, r)
	}
	if err := ValidateMounts(spec.Mounts); err != nil {
		return nil, nil, err
	}
	for _, m := range spec.Mounts {
		fi, _ := os.Stat(m.Source)
		mounts = append(mounts, mountSpec{Kind: mountFD, Target: m.Target, FD: len(idmaps), File: !fi.IsDir()})
		idmaps = append(idmaps, idmapSource{path: m.Source, readOnly: !m.Writable})
		if m.Writable {
			cfg.WritablePaths = append(cfg.WritablePaths, m.Target)
		}
		covered = append(covered, m.Target) // a file: only the file itself
	}
	if spec.FileSizeLimit < 0 {
		return nil, nil, actuation.Refusef(actuation.CodeInvalidSpec, "negative file size limit")
	}
	cfg.FileSizeLimit = spec.FileSizeLimit
	if spec.KillAfter > 0 {
		cfg.KillAfterMS = max(spec.KillAfter.Milliseconds(), 1)
	}
	if !spec.GitMetadataWritable {
		cfg.GitProtect = spec.WritableRoots
	}

	// The working directory.
	switch {
	case spec.Dir == "" || spec.Dir == spec.TempDir:
		cfg.Dir = SandboxTmp
	case under(spec.Dir, covered):
		cfg.Dir = spec.Dir
	default:
		return nil, nil, actuation.Refusef(actuation.CodeInvalidSpec,
			"working directory %q is neither under a root nor the private temp dir", spec.Dir)
	}
	// The program, when it lives outside everything above (read-only).
	if real, err := filepath.EvalSymlinks(spec.Argv[0]); err == nil && !under(real, covered) && !under(spec.Argv[0], covered) {
		if fi, err := os.Stat(real); err == nil && fi.Mode().IsRegular() {
			mounts = append(mounts, mountSpec{Kind: mountFD, Target: spec.Argv[0], FD: len(idmaps), File: true})
			idmaps = append(idmaps, idmapSource{path: real, readOnly: true})
		}
	}
	// Parents before children; equal depth keeps the order above.
	slices.SortStableFunc(mounts, func(a, b mountSpec) int { return depth(a.Target) - depth(b.Target) })
	cfg.Mounts = mounts
	return cfg, idmaps, nil
}

func depth(p string) int { return strings.Count(filepath.Clean(p), "/") }

func capLastCap() (int, error) {
	b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap")
	if err != nil {
		return 0, fmt.Errorf("read cap_last_cap: %w", err)
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("parse cap_last_cap %q: %w", b, err)
	}
	return n, nil
}

// CheckSandbox starts a trivial program (/bin/true) in a sandbox with opts and
// reports whether every layer could be established: nil, or the refusal (its
// code names the missing kernel primitive: landlock-unavailable,
// userns-unavailable, idmap-unavailable, seccomp-unavailable, ...). The node
// publishes the answer in its BackendCapability.
func CheckSandbox(opts StartOptions, tempBase string) error {
	prog := "/bin/true"
	if _, err := os.Stat(prog); err != nil {
		prog = "/usr/bin/true"
	}
	tmp, err := os.MkdirTemp(tempBase, "procexec-check-")
	if err != nil {
		return fmt.Errorf("procexec: sandbox check temp dir: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }() // the check's scratch directory
	sb, err := StartSandboxed(SandboxSpec{Argv: []string{prog}, Env: []string{}, TempDir: tmp}, opts)
	if err != nil {
		return err
	}
	defer sb.Close()
	st, err := sb.Process.Wait()
	if err != nil {
		return fmt.Errorf("procexec: sandbox check: %w", err)
	}
	if code, sig := sb.ExitStatus(unix.WaitStatus(st.Sys().(syscall.WaitStatus))); code != 0 || sig != "" {
		return actuation.Refusef(actuation.CodeSandboxSetupFailed, "sandbox check: %s ended with exit %d signal %q", prog, code, sig)
	}
	return nil
}

// MergeLeftovers adds to a cgroup report what the sandbox's PID 1 found still alive when
// the program ended (the end of the PID namespace killed them before the cgroup teardown
// could see them), so the outcome reports everything that was left.
func MergeLeftovers(cg *CgroupReport, sb *Sandboxed) {
	if cg == nil || sb == nil {
		return
	}
	n, procs := sb.Leftovers()
	if n == 0 {
		return
	}
	cg.Kill.Found += n
	for _, p := range procs {
		cg.Kill.Procs = append(cg.Kill.Procs, cgroups.Proc{Pid: p.Pid, Ppid: p.Ppid, Comm: p.Comm})
	}
}
