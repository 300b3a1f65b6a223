package procexec

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/proctest"
)

// Environment variables that switch the test binary into a child mode when it
// is itself the sandboxed program.
const (
	testModeEnv   = "PROCEXEC_TEST_MODE"
	unprivEnv     = "PROCEXEC_UNPRIVILEGED_CHILD"
	testDialEnv   = "PROCEXEC_TEST_DIAL"
	testWritesEnv = "PROCEXEC_TEST_WRITES"
	// noRaceExitSleep stops a race-instrumented child from sleeping 1s at exit.
	noRaceExitSleep = "GORACE=atexit_sleep_ms=0"
)

func TestMain(m *testing.M) {
	MaybeRunHelper()
	if mode := os.Getenv(testModeEnv); mode != "" {
		os.Exit(childMode(mode))
	}
	if os.Geteuid() == 0 && os.Getenv(unprivEnv) == "" {
		if err := EnableSubreaper(); err != nil {
			fmt.Fprintln(os.Stderr, "EnableSubreaper:", err)
			os.Exit(2)
		}
	}
	code := m.Run()
	if slimPath != "" {
		_ = os.RemoveAll(filepath.Dir(slimPath))
	}
	os.Exit(code)
}

// childMode runs inside the sandbox (the test binary is the program).
func childMode(mode string) int {
	switch mode {
	case poolOrphanMode:
		return poolOrphanChild()
	case agentDiesMode:
		return agentDiesChild()
	case "dial", "dial-unix":
		network := "tcp"
		if mode == "dial-unix" {
			network = "unix"
		}
		c, err := net.DialTimeout(network, os.Getenv(testDialEnv), 2*time.Second)
		if err != nil {
			fmt.Println("dial-err", err)
			return 0
		}
		_ = c.Close()
		fmt.Println("dial-ok")
	case "socketpair":
		fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_STREAM, 0)
		if err != nil {
			fmt.Println("socketpair-err", err)
			return 0
		}
		unix.Close(fds[0])
		unix.Close(fds[1])
		fmt.Println("socketpair-ok")
	case "loopback":
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			fmt.Println("listen-err", err)
			return 0
		}
		defer func() { _ = l.Close() }()
		c, err := net.DialTimeout("tcp", l.Addr().String(), 2*time.Second)
		if err != nil {
			fmt.Println("dial-err", err)
			return 0
		}
		_ = c.Close()
		fmt.Println("loopback-ok")
	case "write":
		for _, p := range strings.Split(os.Getenv(testWritesEnv), ":") {
			if err := os.WriteFile(p, []byte("x"), 0o644); err != nil {
				var errno syscall.Errno
				errors.As(err, &errno)
				fmt.Println("err", p, unix.ErrnoName(errno))
				continue
			}
			fmt.Println("ok", p)
		}
	default:
		fmt.Println("unknown mode", mode)
		return 2
	}
	return 0
}

func requireSandbox(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("requires root: clone(CLONE_NEWNET) needs CAP_SYS_ADMIN; without it procexec refuses with egress-forbidden")
	}
	if abi, err := landlockABI(); err != nil || abi < MinLandlockABI {
		t.Skipf("requires Landlock ABI >= %d (kernel reports %d, err %v); without it procexec refuses with landlock-unavailable", MinLandlockABI, abi, err)
	}
}

func run(t *testing.T, spec Spec) Result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := Run(ctx, spec)
	if err != nil {
		t.Fatalf("Run(%q): %v", spec.Argv, err)
	}
	return res
}

// runWithTemp starts spec on r, waits for it and returns its result with the host path of
// its private temp directory (Info().TempDir, read while it runs).
func runWithTemp(ctx context.Context, t *testing.T, r *Runner, spec Spec) (Result, string) {
	t.Helper()
	h, err := r.Start(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	hostTmp := h.Info().TempDir
	res, err := h.Wait()
	if err != nil {
		t.Fatal(err)
	}
	return res, hostTmp
}

func selfExe(t testing.TB) string {
	t.Helper()
	p, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func TestExitCodesAndIdentity(t *testing.T) {
	requireSandbox(t)
	res := run(t, Spec{Argv: []string{"/bin/sh", "-c", "exit 3"}})
	if res.ExitCode != 3 || res.Signal != "" || res.SignalOrigin != OriginExit {
		t.Fatalf("exit 3: %+v", res)
	}
	if res.Pid <= 1 || res.Pgid != res.Pid || res.StartTime == 0 || !res.CleanupComplete {
		t.Fatalf("identity/cleanup: pid=%d pgid=%d start=%d cleanup=%v", res.Pid, res.Pgid, res.StartTime, res.CleanupComplete)
	}
	if res = run(t, Spec{Argv: []string{"/bin/true"}}); res.ExitCode != 0 {
		t.Fatalf("/bin/true: %+v", res)
	}
}

func TestOutputCombinedInArrivalOrder(t *testing.T) {
	requireSandbox(t)
	res := run(t, Spec{Argv: []string{"/bin/sh", "-c", "echo out1; echo err1 >&2; echo out2"}})
	if got := string(res.Output); got != "out1\nerr1\nout2\n" || res.Truncated || res.OutputBytesSeen != 15 {
		t.Fatalf("output %q truncated=%v seen=%d", got, res.Truncated, res.OutputBytesSeen)
	}
}

func TestOutputCapSharedAndExactCount(t *testing.T) {
	requireSandbox(t)
	res := run(t, Spec{
		Argv:        []string{"/bin/sh", "-c", "head -c 5000 /dev/zero | tr '\\0' a; printf BBBB >&2"},
		Env:         []string{"PATH=/usr/bin:/bin"},
		OutputBytes: 1000,
	})
	if res.ExitCode != 0 {
		t.Fatalf("exit %d output %q", res.ExitCode, res.Output)
	}
	if len(res.Output) != 1000 || !res.Truncated || res.OutputBytesSeen != 5004 {
		t.Fatalf("cap: len=%d truncated=%v seen=%d", len(res.Output), res.Truncated, res.OutputBytesSeen)
	}
	if strings.Trim(string(res.Output), "a") != "" {
		t.Fatalf("captured bytes are not the first 1000: %q", res.Output[:20])
	}
}

func TestTimeoutKillsWholeGroupAfterGrace(t *testing.T) {
	requireSandbox(t)
	// Both the shell and its grandchild ignore SIGTERM: only the SIGKILL
	// after the grace period can end them. The shell prints its PID
	// namespace so the test can check that nothing of it is left.
	res := run(t, Spec{
		Argv:    []string{"/bin/sh", "-c", `trap "" TERM; /bin/sleep 300 & readlink /proc/self/ns/pid; wait`},
		Timeout: 300 * time.Millisecond,
		Grace:   300 * time.Millisecond,
	})
	if res.SignalOrigin != OriginTimeout || res.Signal != "SIGKILL" || res.ExitCode != -1 {
		t.Fatalf("timeout result: origin=%s signal=%s exit=%d", res.SignalOrigin, res.Signal, res.ExitCode)
	}
	if res.Duration < 550*time.Millisecond {
		t.Fatalf("ended after %s: the grace period was not honoured", res.Duration)
	}
	requireNamespaceEmpty(t, string(res.Output))
	if exists, _ := GroupExists(res.Pgid); exists || !res.CleanupComplete {
		t.Fatalf("group %d exists=%v cleanup=%v", res.Pgid, exists, res.CleanupComplete)
	}
}

// requireNamespaceEmpty fails unless the sandbox printed a PID namespace
// ("pid:[N]") other than the test's and no host process remains in it.
func requireNamespaceEmpty(t *testing.T, out string) {
	t.Helper()
	ns := strings.TrimSpace(out)
	own, _ := os.Readlink("/proc/self/ns/pid")
	if !strings.HasPrefix(ns, "pid:[") || ns == own {
		t.Fatalf("sandbox PID namespace %q (the test's is %q)", ns, own)
	}
	pids, err := proctest.Pids()
	if err != nil {
		t.Fatal(err)
	}
	for _, pid := range pids {
		if l, err := os.Readlink(proctest.Path(pid, "ns/pid")); err == nil && l == ns {
			t.Fatalf("process %d of the sandbox's PID namespace %s survived the command", pid, ns)
		}
	}
}

func TestLeftoverGroupMembersKilledOnExit(t *testing.T) {
	requireSandbox(t)
	// The shell exits at once leaving a background sleep holding the pipe,
	// and a setsid'd one outside its process group.
	start := time.Now()
	res := run(t, Spec{Argv: []string{"/bin/sh", "-c", "/bin/sleep 300 & /usr/bin/setsid /bin/sleep 300 & readlink /proc/self/ns/pid"}})
	if res.ExitCode != 0 || res.SignalOrigin != OriginExit {
		t.Fatalf("result %+v", res)
	}
	requireNamespaceEmpty(t, string(res.Output))
	if !res.CleanupComplete || time.Since(start) > 5*time.Second {
		t.Fatalf("cleanup=%v after %s", res.CleanupComplete, time.Since(start))
	}
}

func TestCancelAndOperatorOrigins(t *testing.T) {
	requireSandbox(t)
	ctx, cancel := context.WithCancel(context.Background())
	h, err := Start(ctx, Spec{Argv: []string{"/bin/sleep", "30"}, Grace: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	res, err := h.Wait()
	if err != nil || res.SignalOrigin != OriginCancel || res.Signal != "SIGTERM" {
		t.Fatalf("cancel: origin=%s signal=%s err=%v res=%+v", res.SignalOrigin, res.Signal, err, res)
	}

	h, err = Start(context.Background(), Spec{Argv: []string{"/bin/sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if info := h.Info(); info.Pid <= 1 || info.StartTime == 0 {
		t.Fatalf("info %+v", info)
	}
	h.Kill(OriginOperator)
	h.Kill(OriginTimeout) // the first origin wins
	res, err = h.Wait()
	if err != nil || res.SignalOrigin != OriginOperator || res.Signal != "SIGTERM" {
		t.Fatalf("operator: origin=%s signal=%s err=%v", res.SignalOrigin, res.Signal, err)
	}
}

func TestNetworkIsolation(t *testing.T) {
	requireSandbox(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	res := run(t, Spec{
		Argv: []string{selfExe(t)},
		Env:  []string{noRaceExitSleep, testModeEnv + "=dial", testDialEnv + "=" + ln.Addr().String()},
	})
	if !strings.HasPrefix(string(res.Output), "dial-err") {
		t.Fatalf("sandboxed dial to host loopback listener %s: %q", ln.Addr(), res.Output)
	}
	select {
	case c := <-accepted:
		_ = c.Close()
		t.Fatal("the host listener received a connection from the sandbox")
	case <-time.After(200 * time.Millisecond):
	}
	// The same dial from the test process works.
	c, err := net.DialTimeout("tcp", ln.Addr().String(), 2*time.Second)
	if err != nil {
		t.Fatalf("control dial from the test process: %v", err)
	}
	_ = c.Close()
	select {
	case c := <-accepted:
		_ = c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("control connection was not accepted within 5s")
	}

	// A non-loopback host address is unreachable as well.
	if ip := hostIPv4(); ip != nil {
		ln2, err := net.Listen("tcp", net.JoinHostPort(ip.String(), "0"))
		if err != nil {
			t.Fatalf("listen on %s: %v", ip, err)
		}
		defer func() { _ = ln2.Close() }()
		res := run(t, Spec{
			Argv: []string{selfExe(t)},
			Env:  []string{noRaceExitSleep, testModeEnv + "=dial", testDialEnv + "=" + ln2.Addr().String()},
		})
		if !strings.HasPrefix(string(res.Output), "dial-err") {
			t.Fatalf("sandboxed dial to host address %s: %q", ln2.Addr(), res.Output)
		}
	}
}

func hostIPv4() net.IP {
	addrs, _ := net.InterfaceAddrs()
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && !n.IP.IsLoopback() && n.IP.To4() != nil {
			return n.IP
		}
	}
	return nil
}

func TestOnlyLoopbackInside(t *testing.T) {
	requireSandbox(t)
	res := run(t, Spec{Argv: []string{"/bin/cat", "/proc/net/dev"}})
	var ifaces []string
	for _, line := range strings.Split(string(res.Output), "\n") {
		if name, _, ok := strings.Cut(line, ":"); ok {
			ifaces = append(ifaces, strings.TrimSpace(name))
		}
	}
	if !slices.Equal(ifaces, []string{"lo"}) {
		t.Fatalf("interfaces inside the sandbox: %q (from %q)", ifaces, res.Output)
	}
	res = run(t, Spec{Argv: []string{selfExe(t)}, Env: []string{noRaceExitSleep, testModeEnv + "=loopback"}})
	if strings.TrimSpace(string(res.Output)) != "loopback-ok" {
		t.Fatalf("loopback inside the sandbox is not usable: %q", res.Output)
	}
}

func TestEnvironmentIsExactlyCurated(t *testing.T) {
	requireSandbox(t)
	t.Setenv("SSH_AUTH_SOCK", "/tmp/ssh-agent.sock")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "do-not-leak")
	want := []string{"LANG=C.UTF-8", "PATH=/usr/bin:/bin", "WORKBENCH_X=1"}
	res := run(t, Spec{Argv: []string{"/usr/bin/env"}, Env: want})
	got := strings.Split(strings.TrimSpace(string(res.Output)), "\n")
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("child environment %q, want exactly %q", got, want)
	}
	res = run(t, Spec{Argv: []string{"/usr/bin/env"}})
	if len(res.Output) != 0 {
		t.Fatalf("nil Env must give an empty environment, got %q", res.Output)
	}
}

func TestLandlockConfinesWrites(t *testing.T) {
	requireSandbox(t)
	inside, outside := t.TempDir(), t.TempDir()
	okPath, badPath := filepath.Join(inside, "ok"), filepath.Join(outside, "bad")
	res := run(t, Spec{
		Argv:          []string{selfExe(t)},
		Env:           []string{noRaceExitSleep, testModeEnv + "=write", testWritesEnv + "=" + okPath + ":" + badPath},
		WritableRoots: []string{inside},
	})
	// The other directory is not even in the sandbox's root.
	want := fmt.Sprintf("ok %s\nerr %s ENOENT\n", okPath, badPath)
	if string(res.Output) != want {
		t.Fatalf("writes: %q, want %q", res.Output, want)
	}
	if _, err := os.Stat(okPath); err != nil {
		t.Fatalf("write inside the root did not land: %v", err)
	}
	if _, err := os.Stat(badPath); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("write outside the roots landed: %v", err)
	}
}

// TestRootSwappedForSymlinkRefused: a root whose path became a symlink (swapped after the
// agent pinned it) is refused with root-changed before anything runs; the program never
// writes into the link's target.
func TestRootSwappedForSymlinkRefused(t *testing.T) {
	requireSandbox(t)
	base, elsewhere := t.TempDir(), t.TempDir()
	root := filepath.Join(base, "root")
	if err := os.Symlink(elsewhere, root); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(root, "planted")
	_, err := Run(context.Background(), Spec{Argv: []string{"/bin/sh", "-c", "echo x > " + target}, WritableRoots: []string{root}})
	if !(actuation.CodeOf(err) == actuation.CodeRootChanged) {
		t.Fatalf("writable root through a symlink: %v, want %s", err, actuation.CodeRootChanged)
	}
	_, err = Run(context.Background(), Spec{Argv: []string{"/bin/true"}, ReadableRoots: []string{root}})
	if !(actuation.CodeOf(err) == actuation.CodeRootChanged) {
		t.Fatalf("readable root through a symlink: %v, want %s", err, actuation.CodeRootChanged)
	}
	if _, err := os.Stat(filepath.Join(elsewhere, "planted")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the symlink's target was written: %v", err)
	}
}

func TestReadConfinementAndPrivateTemp(t *testing.T) {
	requireSandbox(t)
	secret := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(secret, []byte("s3cret"), 0o644); err != nil {
		t.Fatal(err)
	}
	res, hostTmp := runWithTemp(context.Background(), t, defaultRunner, Spec{
		Argv: []string{"/bin/sh", "-c",
			`echo x > "$TMPDIR/f" && cat "$TMPDIR/f" && echo "$TMPDIR" && cat "$1" 2>/dev/null || echo read-denied`,
			"sh", secret},
		TempDirEnv: "TMPDIR",
	})
	lines := strings.Split(strings.TrimSpace(string(res.Output)), "\n")
	if len(lines) != 3 || lines[0] != "x" || lines[1] != SandboxTmp || lines[2] != "read-denied" {
		t.Fatalf("output %q", res.Output)
	}
	if !strings.HasPrefix(hostTmp, os.TempDir()) {
		t.Fatalf("host temp dir %q not under %s", hostTmp, os.TempDir())
	}
	if _, err := os.Stat(hostTmp); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("private temp dir %s was not removed: %v", hostTmp, err)
	}
	if !res.CleanupComplete {
		t.Fatal("cleanup not complete")
	}
}

func TestWorkingDirectory(t *testing.T) {
	requireSandbox(t)
	dir := t.TempDir()
	res := run(t, Spec{Argv: []string{"/bin/pwd"}, Dir: dir, ReadableRoots: []string{dir}})
	if got := strings.TrimSpace(string(res.Output)); got != dir {
		t.Fatalf("pwd = %q, want %q", got, dir)
	}
}

func TestExecFailureIsReported(t *testing.T) {
	requireSandbox(t)
	_, err := Run(context.Background(), Spec{Argv: []string{"/nonexistent/program"}})
	if !errors.Is(err, syscall.ENOENT) || string(actuation.CodeOf(err)) != "" {
		t.Fatalf("exec of a missing program: %v", err)
	}
}

func TestRefusals(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		spec Spec
		code string
	}{
		{"relative argv0", Spec{Argv: []string{"sh", "-c", "true"}}, string(actuation.CodeInvalidSpec)},
		{"unclean argv0", Spec{Argv: []string{"/bin/../bin/true"}}, string(actuation.CodeInvalidSpec)},
		{"host network", Spec{Argv: []string{"/bin/true"}, Network: "host"}, string(actuation.CodeEgressForbidden)},
		{"timeout above max", Spec{Argv: []string{"/bin/true"}, Timeout: MaxTimeout + 1}, string(actuation.CodeTimeoutAboveMax)},
		{"grace above max", Spec{Argv: []string{"/bin/true"}, Grace: MaxGrace + 1}, string(actuation.CodeTimeoutAboveMax)},
		{"output above max", Spec{Argv: []string{"/bin/true"}, OutputBytes: MaxOutputBytes + 1}, string(actuation.CodeOutputCapAboveMax)},
		{"bad env", Spec{Argv: []string{"/bin/true"}, Env: []string{"NOEQUALS"}}, string(actuation.CodeInvalidSpec)},
		{"relative root", Spec{Argv: []string{"/bin/true"}, WritableRoots: []string{"tmp"}}, string(actuation.CodeInvalidSpec)},
		{"slash root", Spec{Argv: []string{"/bin/true"}, WritableRoots: []string{"/"}}, string(actuation.CodeInvalidSpec)},
		{"missing dir", Spec{Argv: []string{"/bin/true"}, Dir: "/nonexistent"}, string(actuation.CodeInvalidSpec)},
	}
	for _, c := range cases {
		if _, err := Run(ctx, c.spec); !(actuation.CodeOf(err) == actuation.Code(c.code)) {
			t.Errorf("%s: got %v, want refusal %s", c.name, err, c.code)
		}
	}
	cctx, cancel := context.WithCancel(ctx)
	cancel()
	if _, err := Run(cctx, Spec{Argv: []string{"/bin/true"}}); !(actuation.CodeOf(err) == actuation.CodeInterrupted) {
		t.Errorf("cancelled context: %v", err)
	}
}

func TestLandlockUnavailableFailsClosed(t *testing.T) {
	orig := landlockABI
	t.Cleanup(func() { landlockABI = orig })
	landlockABI = func() (int, error) { return 0, syscall.ENOSYS }
	if _, err := Run(context.Background(), Spec{Argv: []string{"/bin/true"}}); !(actuation.CodeOf(err) == actuation.CodeLandlockUnavailable) {
		t.Fatalf("no Landlock: %v", err)
	}
	landlockABI = func() (int, error) { return 2, nil }
	if _, err := Run(context.Background(), Spec{Argv: []string{"/bin/true"}}); !(actuation.CodeOf(err) == actuation.CodeLandlockUnavailable) {
		t.Fatalf("Landlock ABI 2: %v", err)
	}
	// landlockConfig's own refusal of ABI 2: sandboxhelper.TestLandlockConfigRefusesOldABI.
}

func TestConcurrencyCap(t *testing.T) {
	requireSandbox(t)
	r := NewRunner(Limits{MaxConcurrent: 1})
	h, err := r.Start(context.Background(), Spec{Argv: []string{"/bin/sleep", "30"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Start(context.Background(), Spec{Argv: []string{"/bin/true"}}); !(actuation.CodeOf(err) == actuation.CodeCommandCapReached) {
		t.Fatalf("second command: %v", err)
	}
	h.Kill(OriginOperator)
	if _, err := h.Wait(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(context.Background(), Spec{Argv: []string{"/bin/true"}}); err != nil {
		t.Fatalf("slot not released: %v", err)
	}
}

// TestEgressForbiddenWithoutPrivilege re-runs this test binary as nobody: the
// sandbox's user namespace cannot map its root to the sandbox uid, and
// procexec must refuse instead of running unconfined.
func TestEgressForbiddenWithoutPrivilege(t *testing.T) {
	if os.Getenv(unprivEnv) != "" {
		_, err := Run(context.Background(), Spec{Argv: []string{"/bin/true"}})
		fmt.Printf("REFUSAL=%s\n", string(actuation.CodeOf(err)))
		return
	}
	requireSandbox(t)
	if _, err := exec.LookPath("/bin/true"); err != nil {
		t.Skip("no /bin/true")
	}
	dir, err := os.MkdirTemp("", "procexec-unpriv-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = os.RemoveAll(dir) }()
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "procexec.test")
	src, err := os.Open(selfExe(t))
	if err != nil {
		t.Fatal(err)
	}
	dst, err := os.OpenFile(bin, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	_, err = io.Copy(dst, src)
	_ = src.Close()
	if cerr := dst.Close(); err != nil || cerr != nil {
		t.Fatal(err, cerr)
	}
	cmd := exec.Command(bin, "-test.run=^TestEgressForbiddenWithoutPrivilege$", "-test.count=1")
	cmd.Env = []string{unprivEnv + "=1", "TMPDIR=/tmp", noRaceExitSleep}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("unprivileged child: %v\n%s", err, out)
	}
	if !bytes.Contains(out, []byte("REFUSAL="+string(actuation.CodeUserNamespaceUnavailable))) {
		t.Fatalf("unprivileged Run did not refuse with %s:\n%s", string(actuation.CodeUserNamespaceUnavailable), out)
	}
}

// slimPath is where slimBinary builds the helper (TestMain removes its directory).
var slimPath string

// slimBinary builds testdata/helper once per run.
var slimBinary = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "procexec-helper-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "helper")
	slimPath = bin
	// Static, as the image ships cmd/workbench-sandbox (Dockerfile): a cgo build pays
	// the dynamic loader and libc's start on every sandbox.
	build := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, "./testdata/helper")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build testdata/helper: %v\n%s", err, out)
	}
	return bin, nil
})

// slimHelper builds testdata/helper (a binary that only runs MaybeRunHelper).
func slimHelper(t testing.TB) string {
	t.Helper()
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go toolchain to build testdata/helper")
	}
	bin, err := slimBinary()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

func TestDedicatedHelperBinary(t *testing.T) {
	requireSandbox(t)
	r := NewRunner(Limits{HelperPath: slimHelper(t)})
	res, err := r.Run(context.Background(), Spec{Argv: []string{"/bin/cat", "/proc/net/dev"}})
	if err != nil || res.ExitCode != 0 || !strings.Contains(string(res.Output), "lo:") || strings.Count(string(res.Output), ":") != 1 {
		t.Fatalf("dedicated helper: %+v %v", res, err)
	}
}

// TestSandboxCannotSignalAgent: with Landlock IPC scoping (ABI >= 6) the
// program cannot signal processes outside its domain, even as root.
func TestSandboxCannotSignalAgent(t *testing.T) {
	requireSandbox(t)
	if abi, _ := landlockABI(); abi < 6 {
		t.Skipf("requires Landlock ABI >= 6 for signal scoping (kernel reports %d)", abi)
	}
	res := run(t, Spec{Argv: []string{"/bin/sh", "-c", fmt.Sprintf("kill -0 %d && echo signalled || echo denied", os.Getpid())}})
	if !strings.Contains(string(res.Output), "denied") {
		t.Fatalf("sandboxed program could signal the agent: %q", res.Output)
	}
}

// TestHostUnixSocketUnreachable: a network namespace does not isolate
// pathname UNIX sockets; the socket is not even in the sandbox's root, and the
// seccomp filter refuses AF_UNIX through socket(2) and socketpair(2).
func TestHostUnixSocketUnreachable(t *testing.T) {
	requireSandbox(t)
	dir := t.TempDir()
	sock := filepath.Join(dir, "host.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	accepted := make(chan struct{}, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			_ = c.Close()
			accepted <- struct{}{}
		}
	}()
	// Even with the socket's directory mounted as a root, socket(AF_UNIX) is refused.
	res := run(t, Spec{
		Argv:          []string{selfExe(t)},
		Env:           []string{noRaceExitSleep, testModeEnv + "=dial-unix", testDialEnv + "=" + sock},
		ReadableRoots: []string{dir},
	})
	if !strings.HasPrefix(string(res.Output), "dial-err") || !strings.Contains(string(res.Output), "operation not permitted") {
		t.Fatalf("sandboxed dial to host UNIX socket: %q", res.Output)
	}
	select {
	case <-accepted:
		t.Fatal("the host UNIX socket accepted a connection from the sandbox")
	case <-time.After(100 * time.Millisecond):
	}
	res = run(t, Spec{Argv: []string{selfExe(t)}, Env: []string{noRaceExitSleep, testModeEnv + "=socketpair"}})
	if got := strings.TrimSpace(string(res.Output)); got != "socketpair-err operation not permitted" {
		t.Fatalf("socketpair inside the sandbox: %q", res.Output)
	}
}
