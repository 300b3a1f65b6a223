package procexec

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"syscall"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/nodeagent/guestpty"
	"sensorium.dev/workbench/internal/nodeagent/refusal"
)

// The sandbox helper is the agent binary re-executed with HelperArg as argv[1]
// and helperEnvKey=helperEnvValue as its ONLY environment variable. It runs in
// the fresh network namespace created by clone(CLONE_NEWNET), reads its
// configuration (argv, curated env, Landlock roots) from fd 3, brings the
// loopback interface up, applies no_new_privs, Landlock and a seccomp filter
// against UNIX-socket egress (seccomp.go) to its thread and execve(2)s the
// real program from that thread. Any failure before execve is
// reported as JSON on fd 4 (close-on-exec: a successful execve closes it with
// nothing written) and the helper exits with helperFailExit; it never runs the
// program with weaker isolation.
const (
	// HelperArg marks the helper invocation in argv[1].
	HelperArg      = "__sensorium_procexec_sandbox_helper__"
	helperEnvKey   = "SENSORIUM_PROCEXEC_HELPER"
	helperEnvValue = "1"

	helperConfigFD = 3 // ExtraFiles[0]
	helperStatusFD = 4 // ExtraFiles[1]
	helperFailExit = 126

	// maxHelperConfig bounds the configuration read from fd 3.
	maxHelperConfig = 1 << 20
	// maxHelperStatus bounds the status read back by the parent.
	maxHelperStatus = 64 << 10

	// MinLandlockABI is the lowest Landlock ABI accepted: v3 is the first
	// that also confines truncate(2), so writes outside the roots are fully
	// denied. Below it Start refuses with refusal.LandlockUnavailable.
	MinLandlockABI = 3
)

// Paths readable when ReadOnlyAll is false: enough to load and run ordinary
// programs, nothing under /home, /root, /var, /run or /proc.
var (
	systemReadDirs  = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}
	systemReadFiles = []string{
		"/etc/ld.so.cache", "/etc/localtime", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf",
		"/dev/urandom", "/dev/random",
	}
	// Device files every program may open for writing.
	systemWriteFiles = []string{"/dev/null", "/dev/zero", "/dev/full"}
)

// landlockConfigs indexes the go-landlock presets by ABI version (index v-1).
var landlockConfigs = []landlock.Config{
	landlock.V1, landlock.V2, landlock.V3, landlock.V4, landlock.V5, landlock.V6,
	landlock.V7, landlock.V8, landlock.V9, landlock.V10, landlock.V11,
}

// landlockABI reports the kernel's Landlock ABI (overridden in tests).
var landlockABI = ll.LandlockGetABIVersion

type helperConfig struct {
	Argv          []string `json:"argv"`
	Env           []string `json:"env"`
	WritableRoots []string `json:"writableRoots"`
	ReadableRoots []string `json:"readableRoots,omitempty"`
	ReadOnlyAll   bool     `json:"readOnlyAll"`
	HostNetNS     uint64   `json:"hostNetNS"`
	LandlockABI   int      `json:"landlockABI"`
}

type helperStatus struct {
	Code    string `json:"code"`
	Message string `json:"message"`
	Errno   int    `json:"errno,omitempty"`
}

// helper status codes that are not refusals.
const statusExecFailed = "exec-failed"

// MaybeRunHelper must be the first statement of main() in every binary that
// uses procexec (and of TestMain in test binaries). In a normal invocation it
// returns immediately; in a sandbox-helper invocation it never returns.
func MaybeRunHelper() {
	guestpty.MaybeRun() // the guest PTY relay is this executable's other helper mode
	if len(os.Args) != 2 || os.Args[1] != HelperArg || os.Getenv(helperEnvKey) != helperEnvValue {
		return
	}
	runHelper()
	os.Exit(helperFailExit) // unreachable: runHelper execs or exits
}

func runHelper() {
	// Landlock is applied to this OS thread only and execve is issued from
	// the same thread, so the goroutine must never migrate.
	runtime.LockOSThread()

	status := os.NewFile(helperStatusFD, "procexec-status")
	fail := func(code string, errno int, format string, args ...any) {
		_ = json.NewEncoder(status).Encode(helperStatus{Code: code, Message: fmt.Sprintf(format, args...), Errno: errno})
		os.Exit(helperFailExit)
	}
	if status == nil {
		os.Exit(helperFailExit)
	}
	unix.CloseOnExec(helperStatusFD)

	cfgFile := os.NewFile(helperConfigFD, "procexec-config")
	if cfgFile == nil {
		fail(refusal.SandboxSetupFailed, 0, "helper: config descriptor missing")
	}
	raw, err := io.ReadAll(io.LimitReader(cfgFile, maxHelperConfig+1))
	cfgFile.Close()
	if err != nil || len(raw) > maxHelperConfig {
		fail(refusal.SandboxSetupFailed, 0, "helper: read config: %v (%d bytes)", err, len(raw))
	}
	var cfg helperConfig
	if err := json.Unmarshal(raw, &cfg); err != nil || len(cfg.Argv) == 0 {
		fail(refusal.SandboxSetupFailed, 0, "helper: decode config: %v", err)
	}

	// Defence in depth: never exec in the host's network namespace.
	var st unix.Stat_t
	if err := unix.Stat("/proc/self/ns/net", &st); err != nil {
		fail(refusal.EgressForbidden, 0, "helper: stat own network namespace: %v", err)
	}
	if cfg.HostNetNS == 0 || st.Ino == cfg.HostNetNS {
		fail(refusal.EgressForbidden, 0, "helper: still in the host network namespace (inode %d)", st.Ino)
	}
	if err := loopbackUp(); err != nil {
		fail(refusal.SandboxSetupFailed, 0, "helper: bring loopback up: %v", err)
	}

	if err := restrictThread(&cfg); err != nil {
		fail(refusal.LandlockUnavailable, 0, "helper: %v", err)
	}
	if err := denyUnixSockets(); err != nil {
		fail(refusal.EgressForbidden, 0, "helper: cannot block UNIX-socket egress: %v", err)
	}

	err = syscall.Exec(cfg.Argv[0], cfg.Argv, cfg.Env)
	var errno syscall.Errno
	errors.As(err, &errno)
	fail(statusExecFailed, int(errno), "exec %s: %v", cfg.Argv[0], err)
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

// landlockRules builds the filesystem policy: full access below the writable
// roots (including the private temp dir), read-only access to "/" or to the
// system set, write access to a few harmless device files, nothing else.
func landlockRules(cfg *helperConfig) []landlock.Rule {
	rules := []landlock.Rule{
		landlock.RWDirs(cfg.WritableRoots...).WithRefer(),
		landlock.RWFiles(systemWriteFiles...).IgnoreIfMissing(),
	}
	if cfg.ReadOnlyAll {
		return append(rules, landlock.RODirs("/"))
	}
	rules = append(rules,
		landlock.RODirs(systemReadDirs...).IgnoreIfMissing(),
		landlock.ROFiles(systemReadFiles...).IgnoreIfMissing(),
		landlock.ROFiles(cfg.Argv[0]).IgnoreIfMissing(), // a missing program fails at exec with ENOENT
	)
	if len(cfg.ReadableRoots) > 0 {
		rules = append(rules, landlock.RODirs(cfg.ReadableRoots...))
	}
	return rules
}

// landlockConfig returns the strict (non best-effort) preset for the kernel's
// ABI. Network rights are left unhandled (the empty network namespace is the
// network boundary); IPC scopes (signals, abstract sockets; ABI >= 6) are
// kept, so the program cannot signal the agent.
func landlockConfig(abi int) (landlock.Config, error) {
	if abi < MinLandlockABI {
		return landlock.Config{}, fmt.Errorf("landlock ABI %d < required %d", abi, MinLandlockABI)
	}
	c := landlockConfigs[min(abi, len(landlockConfigs))-1]
	c.HandledAccessNet = 0
	return c, nil
}

// restrictThread applies no_new_privs and the Landlock domain to the calling
// (locked) thread. It fails closed: any error aborts the exec.
func restrictThread(cfg *helperConfig) error {
	llc, err := landlockConfig(cfg.LandlockABI)
	if err != nil {
		return err
	}
	fd, flags, err := llc.NewRulesetFD(landlockRules(cfg)...)
	if err != nil {
		return fmt.Errorf("landlock ruleset: %w", err)
	}
	if fd < 0 {
		return errors.New("landlock ruleset: nothing to enforce (kernel support missing)")
	}
	defer unix.Close(fd)
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("prctl(PR_SET_NO_NEW_PRIVS): %w", err)
	}
	if err := ll.LandlockRestrictSelf(fd, flags); err != nil {
		return fmt.Errorf("landlock_restrict_self: %w", err)
	}
	return nil
}
