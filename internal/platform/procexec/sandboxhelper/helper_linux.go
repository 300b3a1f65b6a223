//go:build linux

package sandboxhelper

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"time"
	"unsafe"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
)

// The sandbox helper is a binary whose main() calls MaybeRun first, started by
// the parent (StartSandboxed) with Arg as argv[1] and EnvKey=EnvValue
// as its ONLY environment variable, in fresh user (root mapped to an unprivileged host
// uid), mount, PID, UTS, IPC and network namespaces. It does nothing before it has read
// its whole configuration (and the parent's idmapped mounts) from fd 3, so the parent
// can place it in a cgroup first. Then, on one locked OS thread, it:
//
//  1. enters a new cgroup namespace, sets the hostname, brings loopback up;
//  2. builds a minimal root (root_linux.go) and pivot_roots into it;
//  3. drops every capability (bounding, ambient, inheritable, permitted, effective),
//     locks the securebits so uid 0 in the user namespace gains none at exec, sets
//     no_new_privs, applies Landlock (second layer) and the seccomp filter (built by
//     procexec, seccomp_linux.go; loaded by loadSeccomp);
//  4. forks and execs the program from that thread (it inherits all of the above) and
//     stays as PID 1 of the PID namespace: it reaps orphans, forwards SIGTERM, SIGINT,
//     SIGHUP, SIGQUIT, SIGUSR1 and SIGUSR2 to the program's process group when it is
//     not its own, and exits with the program, which makes the kernel kill whatever is
//     left in the namespace.
//
// fd 4 carries JSON lines to the parent: a failure before the program ran ({code,
// message}), then {"started":true}, then the program's end ({"exited":true,"exit":N} or
// {"exited":true,"signal":N}). The helper never runs a program with weaker isolation.
const (
	// Arg marks the helper invocation in argv[1].
	Arg      = "__sensorium_procexec_sandbox_helper__"
	EnvKey   = "SENSORIUM_PROCEXEC_HELPER"
	EnvValue = "1"

	helperConfigFD = 3 // ExtraFiles[0]: socket carrying the config and mount fds
	helperStatusFD = 4 // ExtraFiles[1]
	ExecFD         = 5 // ExtraFiles[2]: the helper binary itself (closed at once)
	FailExit       = 126

	// maxHelperConfig bounds the configuration read from fd 3.
	maxHelperConfig = 1 << 20
	// maxHelperFDs bounds the mount descriptors passed with it.
	maxHelperFDs = 2*MaxRoots + 8

	// MinLandlockABI is the lowest Landlock ABI accepted: v3 is the first
	// that also confines truncate(2), so writes outside the roots are fully
	// denied. Below it Start refuses with refusal.LandlockUnavailable.
	MinLandlockABI = 3
)

// landlockConfigs indexes the go-landlock presets by ABI version (index v-1).
var landlockConfigs = []landlock.Config{
	landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6,
	landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11,
}

// Config is what the parent sends on fd 3. Paths are paths inside the sandbox.
type Config struct {
	Argv []string `json:"argv"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// Mounts build the sandbox root, in order.
	Mounts []MountSpec `json:"mounts"`
	// WritablePaths and WritableFiles get Landlock write rights; the rest of the
	// (minimal) root is read-only.
	WritablePaths []string   `json:"writablePaths"`
	WritableFiles []string   `json:"writableFiles"`
	Seccomp       BPFProgram `json:"seccomp"`
	HostNetNS     uint64     `json:"hostNetNS"`
	LandlockABI   int        `json:"landlockABI"`
	Hostname      string     `json:"hostname"`
	CapLastCap    int        `json:"capLastCap"`
	// FileSizeLimit > 0 sets RLIMIT_FSIZE for the program, SIGXFSZ ignored.
	FileSizeLimit int64 `json:"fileSizeLimit,omitempty"`
	// GitProtect are the writable roots (paths inside) whose repositories' metadata is
	// made read-only before the program runs (gitmeta.go).
	GitProtect []string `json:"gitProtect,omitempty"`
	// AwaitGo: once every layer is set up, the helper reports {"ready":true} and execs the
	// program only after reading the byte GoByte on fd 3 (StartOptions.BeforeExec); EOF or
	// anything else ends it without running the program.
	AwaitGo bool `json:"awaitGo,omitempty"`
	// KillAfterMS > 0 is the helper's own deadline for the program, counted from its
	// start: the parent's deadline plus its grace plus a margin. The parent enforces the
	// deadline; this is the backstop when the parent is gone (a killed agent): PID 1 then
	// kills everything in the sandbox itself (SandboxSpec.KillAfter).
	KillAfterMS int64 `json:"killAfterMS,omitempty"`
}

// GoByte is the parent's go-ahead for a helper configured with AwaitGo.
const GoByte = 'g'

type Status struct {
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	Errno   int    `json:"errno,omitempty"`
	Ready   bool   `json:"ready,omitempty"` // set up, awaiting the go-ahead (AwaitGo)
	Started bool   `json:"started,omitempty"`
	Exited  bool   `json:"exited,omitempty"`
	Exit    int    `json:"exit,omitempty"`
	Signal  int    `json:"signal,omitempty"`
	// Left counts the processes still alive in the sandbox when the program
	// ended (killed with the PID namespace as the helper exits); LeftProcs
	// names the first maxLeftReported of them (pids inside the sandbox).
	Left      int        `json:"left,omitempty"`
	LeftProcs []LeftProc `json:"leftProcs,omitempty"`
}

// LeftProc is a process found alive in a sandbox after its program ended.
type LeftProc struct {
	Pid  int    `json:"pid"` // inside the sandbox's PID namespace
	Ppid int    `json:"ppid"`
	Comm string `json:"comm"`
}

const maxLeftReported = 16

// leftovers lists the processes of the sandbox other than the helper.
func leftovers() (int, []LeftProc) {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return 0, nil
	}
	n := 0
	var out []LeftProc
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid <= 1 {
			continue
		}
		st, err := ReadStat(pid)
		if err != nil || st.State == 'Z' {
			continue
		}
		n++
		if len(out) < maxLeftReported {
			comm, _ := os.ReadFile("/proc/" + e.Name() + "/comm")
			out = append(out, LeftProc{Pid: pid, Ppid: st.Ppid, Comm: strings.TrimSpace(string(comm))})
		}
	}
	return n, out
}

// MaybeRun must be the first statement of the helper's main() (procexec.MaybeRunHelper
// calls it for binaries that re-execute themselves as the helper). In a normal invocation
// it returns immediately; in a sandbox-helper invocation it never returns.
func MaybeRun() {
	if os.Getenv(EnvKey) != EnvValue {
		return
	}
	if len(os.Args) == 4 && os.Args[1] == SpawnArg {
		runSpawner(os.Args)
	}
	if len(os.Args) != 2 || os.Args[1] != Arg {
		return
	}
	runHelper()
	os.Exit(FailExit) // unreachable: runHelper exits
}

type helperFailure struct {
	code  string
	errno int
	msg   string
}

func failf(code string, format string, args ...any) *helperFailure {
	return &helperFailure{code: code, msg: fmt.Sprintf(format, args...)}
}

func runHelper() {
	// Namespaces entered with unshare, Landlock, capabilities and seccomp are
	// per thread: everything is done on this locked thread and the program is
	// forked from it, so it inherits all of them.
	runtime.LockOSThread()
	_ = unix.Close(ExecFD)

	status := os.NewFile(helperStatusFD, "procexec-status")
	if status == nil {
		os.Exit(FailExit)
	}
	unix.CloseOnExec(helperStatusFD)
	report := func(st Status) { _ = json.NewEncoder(status).Encode(st) }
	// Catch the signals to forward before the parent can send any (it does
	// so only after "started"): PID 1 would otherwise drop them.
	sigs := make(chan os.Signal, 32)
	signal.Notify(sigs, append([]os.Signal{syscall.SIGCHLD}, forwardedSignals...)...)

	cfg, fds, cf, f := readHelperConfig()
	if f == nil {
		f = setupSandbox(cfg, fds)
	}
	if f == nil && cfg.AwaitGo {
		// Set up and confined; the program runs only on the parent's go-ahead (e.g. once
		// the command's start is durably recorded).
		report(Status{Ready: true})
		var b [1]byte
		if n, err := cf.Read(b[:]); n != 1 || b[0] != GoByte {
			f = failf(string(actuation.CodeSandboxSetupFailed), "helper: start not confirmed by the parent (%v)", err)
		}
	}
	if cf != nil {
		_ = cf.Close() // the configuration socket never reaches the program
	}
	var pid int
	if f == nil {
		pid, f = startProgram(cfg)
	}
	if f != nil {
		report(Status{Code: f.code, Message: f.msg, Errno: f.errno})
		os.Exit(FailExit)
	}
	_ = unix.Prctl(unix.PR_SET_NAME, uintptr(unsafe.Pointer(&initName[0])), 0, 0, 0)
	report(Status{Started: true})
	var expired <-chan time.Time
	if cfg.KillAfterMS > 0 {
		expired = time.After(time.Duration(cfg.KillAfterMS) * time.Millisecond)
	}
	ws := superviseInit(pid, sigs, expired)
	end := Status{Exited: true}
	code := 0
	switch {
	case ws.Signaled():
		end.Signal = int(ws.Signal())
		code = 128 + end.Signal
	default:
		end.Exit = ws.ExitStatus()
		code = end.Exit
	}
	end.Left, end.LeftProcs = leftovers()
	report(end)
	os.Exit(code)
}

// readHelperConfig reads the length-prefixed configuration and the mount
// descriptors (SCM_RIGHTS on the first message) from fd 3, and returns fd 3 (the caller
// closes it before the program starts; it is nil once closed here on a failure).
func readHelperConfig() (cfg *Config, fds []int, cf *os.File, f *helperFailure) {
	// One owner for fd 3: the *os.File. Closing the raw fd while an *os.File for it stays
	// reachable would let its finalizer close "fd 3" later — by then another descriptor
	// (e.g. the exec error pipe of startProgram's ForkExec, which then fails with EBADF).
	cf = os.NewFile(helperConfigFD, "procexec-config")
	cfg, fds, f = readHelperConfigFrom(cf)
	if f != nil {
		_ = cf.Close()
		return nil, nil, nil, f
	}
	return cfg, fds, cf, nil
}

func readHelperConfigFrom(cf *os.File) (*Config, []int, *helperFailure) {
	var hdr [8]byte
	oob := make([]byte, unix.CmsgSpace(4*maxHelperFDs))
	n, oobn, _, _, err := unix.Recvmsg(helperConfigFD, hdr[:], oob, unix.MSG_CMSG_CLOEXEC)
	if err != nil || n == 0 {
		return nil, nil, failf(string(actuation.CodeSandboxSetupFailed), "helper: read config header: %v (%d bytes)", err, n)
	}
	var fds []int
	if oobn > 0 {
		msgs, err := unix.ParseSocketControlMessage(oob[:oobn])
		if err != nil {
			return nil, nil, failf(string(actuation.CodeSandboxSetupFailed), "helper: parse descriptors: %v", err)
		}
		for _, m := range msgs {
			got, err := unix.ParseUnixRights(&m)
			if err != nil {
				return nil, nil, failf(string(actuation.CodeSandboxSetupFailed), "helper: parse descriptors: %v", err)
			}
			fds = append(fds, got...)
		}
	}
	r := io.Reader(cf)
	if n < len(hdr) {
		if _, err := io.ReadFull(r, hdr[n:]); err != nil {
			return nil, nil, failf(string(actuation.CodeSandboxSetupFailed), "helper: read config header: %v", err)
		}
	}
	size := binary.LittleEndian.Uint32(hdr[:4])
	if size > maxHelperConfig {
		return nil, nil, failf(string(actuation.CodeSandboxSetupFailed), "helper: config of %d bytes exceeds %d", size, maxHelperConfig)
	}
	raw := make([]byte, size)
	if _, err := io.ReadFull(r, raw); err != nil {
		return nil, nil, failf(string(actuation.CodeSandboxSetupFailed), "helper: read config: %v", err)
	}
	var cfg Config
	if err := json.Unmarshal(raw, &cfg); err != nil || len(cfg.Argv) == 0 {
		return nil, nil, failf(string(actuation.CodeSandboxSetupFailed), "helper: decode config: %v", err)
	}
	if want := binary.LittleEndian.Uint32(hdr[4:]); int(want) != len(fds) {
		return nil, nil, failf(string(actuation.CodeSandboxSetupFailed), "helper: %d mount descriptors received, %d sent", len(fds), want)
	}
	return &cfg, fds, nil
}

// setupSandbox establishes every isolation layer on the calling (locked) thread.
func setupSandbox(cfg *Config, fds []int) *helperFailure {
	// The helper itself keeps capabilities in its user namespace on its other
	// threads: make it non-dumpable so the program (same uid) cannot inspect it.
	if err := unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0); err != nil {
		return failf(string(actuation.CodeSandboxSetupFailed), "helper: prctl(PR_SET_DUMPABLE): %v", err)
	}
	// Defence in depth: never run in the host's network namespace.
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		return failf(string(actuation.CodeEgressForbidden), "helper: stat own network namespace: %v", err)
	}
	if cfg.HostNetNS == 0 || st.Ino == cfg.HostNetNS {
		return failf(string(actuation.CodeEgressForbidden), "helper: still in the host network namespace (inode %d)", st.Ino)
	}
	if os.Getpid() != 1 {
		return failf(string(actuation.CodeUserNamespaceUnavailable), "helper: not PID 1 of a new PID namespace (pid %d)", os.Getpid())
	}
	if err := unix.Unshare(unix.CLONE_NEWCGROUP); err != nil {
		return failf(string(actuation.CodeUserNamespaceUnavailable), "helper: unshare(CLONE_NEWCGROUP): %v", err)
	}
	if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
		return failf(string(actuation.CodeSandboxSetupFailed), "helper: sethostname: %v", err)
	}
	if err := loopbackUp(); err != nil {
		return failf(string(actuation.CodeSandboxSetupFailed), "helper: bring loopback up: %v", err)
	}
	if err := buildRoot(cfg, fds); err != nil {
		return failf(string(actuation.CodeSandboxSetupFailed), "helper: build the sandbox root: %v", err)
	}
	if err := protectGitMetadata(cfg.GitProtect); err != nil {
		return gitProtectFailure(err)
	}
	if err := os.Chdir(cfg.Dir); err != nil {
		return failf(string(actuation.CodeSandboxSetupFailed), "helper: chdir %s: %v", cfg.Dir, err)
	}
	if err := restrictThread(cfg); err != nil {
		return err
	}
	return nil
}

// loopbackUp sets IFF_UP on "lo" in the current network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("socket: %w", err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return fmt.Errorf("ifreq: %w", err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCGIFFLAGS lo: %w", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("SIOCSIFFLAGS lo: %w", err)
	}
	return nil
}

// landlockRules: the whole (minimal) root read/execute, full access below the
// writable paths, write access to a few device files.
func landlockRules(cfg *Config) []landlock.Rule {
	rules := []landlock.Rule{landlock.RODirs("/")}
	if len(cfg.WritablePaths) > 0 {
		rules = append(rules, landlock.RWDirs(cfg.WritablePaths...).WithRefer())
	}
	if len(cfg.WritableFiles) > 0 {
		rules = append(rules, landlock.RWFiles(cfg.WritableFiles...).WithIoctlDev().IgnoreIfMissing())
	}
	return rules
}

// landlockConfig returns the strict (non best-effort) preset for the kernel's
// ABI. Network rights are left unhandled (the empty network namespace is the
// network boundary); IPC scopes (signals, abstract sockets; ABI >= 6) are
// kept.
func landlockConfig(abi int) (landlock.Config, error) {
	if abi < MinLandlockABI {
		return landlock.Config{}, fmt.Errorf("landlock ABI %d < required %d", abi, MinLandlockABI)
	}
	c := landlockConfigs[min(abi, len(landlockConfigs))-1]
	c.HandledAccessNet = 0
	return c, nil
}

// restrictThread drops every capability, sets no_new_privs and applies
// Landlock and seccomp to the calling (locked) thread. It fails closed.
func restrictThread(cfg *Config) *helperFailure {
	llc, err := landlockConfig(cfg.LandlockABI)
	if err != nil {
		return failf(string(actuation.CodeLandlockUnavailable), "helper: %v", err)
	}
	fd, flags, err := llc.NewRulesetFD(landlockRules(cfg)...)
	if err != nil {
		return failf(string(actuation.CodeLandlockUnavailable), "helper: landlock ruleset: %v", err)
	}
	if fd < 0 {
		return failf(string(actuation.CodeLandlockUnavailable), "helper: landlock ruleset: nothing to enforce (kernel support missing)")
	}
	defer unix.Close(fd)
	if err := dropCapabilities(cfg.CapLastCap); err != nil {
		return failf(string(actuation.CodeSandboxSetupFailed), "helper: drop capabilities: %v", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return failf(string(actuation.CodeSandboxSetupFailed), "helper: prctl(PR_SET_NO_NEW_PRIVS): %v", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return failf(string(actuation.CodeLandlockUnavailable), "helper: landlock_restrict_self: %v", err)
	}
	if err := loadSeccomp(cfg.Seccomp); err != nil {
		return failf(string(actuation.CodeSeccompUnavailable), "helper: install seccomp filter: %v", err)
	}
	return nil
}

// Securebits (linux/securebits.h): uid 0 gains no capability at exec, and
// nothing can undo it.
const (
	secbitNoroot              = 1 << 0
	secbitNorootLocked        = 1 << 1
	secbitNoSetuidFixup       = 1 << 2
	secbitNoSetuidFixupLocked = 1 << 3
	secbitKeepCapsLocked      = 1 << 5
	secbitNoCapAmbientRaise   = 1 << 6
	secbitNoCapAmbientLocked  = 1 << 7
)

func dropCapabilities(last int) error {
	if last <= 0 || last > 63 {
		return fmt.Errorf("cap_last_cap %d out of range", last)
	}
	bits := secbitNoroot | secbitNorootLocked | secbitNoSetuidFixup | secbitNoSetuidFixupLocked |
		secbitKeepCapsLocked | secbitNoCapAmbientRaise | secbitNoCapAmbientLocked
	if err := unix.Prctl(unix.PR_SET_SECUREBITS, uintptr(bits), 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_SECUREBITS): %w", err)
	}
	for c := 0; c <= last; c++ {
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("prctl(PR_CAPBSET_DROP, %d): %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_CAP_AMBIENT_CLEAR_ALL): %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("capset: %w", err)
	}
	return nil
}

// startProgram forks and execs the program from the locked thread.
func startProgram(cfg *Config) (int, *helperFailure) {
	if cfg.FileSizeLimit > 0 {
		// Ignored (not caught) signals stay ignored across exec: a write
		// past the limit then fails with EFBIG instead of killing.
		signal.Ignore(syscall.SIGXFSZ)
		lim := unix.Rlimit{Cur: uint64(cfg.FileSizeLimit), Max: uint64(cfg.FileSizeLimit)}
		if err := unix.Setrlimit(unix.RLIMIT_FSIZE, &lim); err != nil {
			return 0, failf(string(actuation.CodeSandboxSetupFailed), "helper: setrlimit(RLIMIT_FSIZE, %d): %v", cfg.FileSizeLimit, err)
		}
	}
	pid, err := syscall.ForkExec(cfg.Argv[0], cfg.Argv, &syscall.ProcAttr{
		Dir:   cfg.Dir,
		Env:   cfg.Env,
		Files: []uintptr{0, 1, 2},
	})
	if err != nil {
		var errno syscall.Errno
		errors.As(err, &errno)
		return 0, &helperFailure{code: string(actuation.CodeExecFailed), errno: int(errno), msg: fmt.Sprintf("exec %s: %v", cfg.Argv[0], err)}
	}
	return pid, nil
}

// initName is the helper's comm once it supervises the program.
var initName = []byte("sandbox-init\x00")

// forwardedSignals reach the program's process group when it is not the
// helper's own (a group signal from the parent reaches both already).
var forwardedSignals = []os.Signal{
	syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2,
}

// superviseInit is PID 1's loop: reap every child, forward signals, return
// the program's wait status once it has ended. When expired fires (the helper's own
// deadline), every process of the sandbox is killed (kill(-1) from PID 1 reaches all of
// its PID namespace but itself).
func superviseInit(pid int, sigs <-chan os.Signal, expired <-chan time.Time) unix.WaitStatus {
	own := unix.Getpgrp()
	// Signals that arrived while the sandbox was being set up did not reach
	// the program: deliver them now.
	for pending := true; pending; {
		select {
		case s := <-sigs:
			if s != syscall.SIGCHLD {
				_ = unix.Kill(pid, s.(syscall.Signal))
			}
		default:
			pending = false
		}
	}
	for {
		for {
			var ws unix.WaitStatus
			got, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if err != nil || got <= 0 {
				break
			}
			if got == pid && (ws.Exited() || ws.Signaled()) {
				return ws
			}
		}
		var s os.Signal
		select {
		case s = <-sigs:
		case <-expired:
			expired = nil
			_ = unix.Kill(-1, unix.SIGKILL)
			continue
		}
		if s == syscall.SIGCHLD {
			continue
		}
		if pg, err := unix.Getpgid(pid); err == nil && pg != own && pg > 1 {
			_ = unix.Kill(-pg, s.(syscall.Signal))
		} else if err == nil && pg != own {
			_ = unix.Kill(pid, s.(syscall.Signal))
		}
	}
}

// loadSeccomp installs prog on the calling thread (no_new_privs must be set). The
// parent builds the program (procexec's seccomp policy) and ships it packed in the
// configuration: the helper links no policy or BPF assembler.
func loadSeccomp(prog []unix.SockFilter) error {
	if len(prog) == 0 {
		return errors.New("empty seccomp program")
	}
	fprog := unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]}
	return unix.Prctl(unix.PR_SET_SECCOMP, unix.SECCOMP_MODE_FILTER, uintptr(unsafe.Pointer(&fprog)), 0, 0)
}
