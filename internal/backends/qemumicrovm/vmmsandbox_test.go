package qemumicrovm

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/platform/cgroups"
)

// TestVMMConfinement boots a real guest (TCG) with a cgroup manager and reads, from the
// host, what QEMU and vhost-device-vsock run with: the VMM uid, no capability in any set,
// no_new_privs, QEMU's seccomp filter, their own mount/IPC/UTS namespaces (QEMU also PID),
// a root holding nothing of the agent's state dir, /root, /home, /var, /run or /sys, and
// the VM's own cgroup.
func TestVMMConfinement(t *testing.T) {
	imageDir, img := vmEnv(t)
	if os.Geteuid() != 0 {
		t.Skip("the VMM sandbox needs root (CI runs as root)")
	}
	cfg := testConfig(t, imageDir)
	parent := fmt.Sprintf("workbench-test-%d-vmmconf", os.Getpid())
	m, err := cgroups.NewManager(cgroups.Config{Parent: parent})
	if err != nil {
		t.Fatal(err)
	}
	if m.Available() {
		t.Logf("cgroups: %s", m.Describe())
		cfg.Cgroups = m
		t.Cleanup(func() {
			_, _ = m.Sweep(nil)
			m.RemoveParent()
		})
	} else {
		t.Logf("no usable cgroups here (%s): the cgroup check is skipped", m.Describe())
	}
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec("env-vmmconf", img)
	if _, err := b.Allocate(ctxT(t, 90*time.Second), spec); err != nil {
		t.Fatalf("allocate: %v", err)
	}
	defer teardown(t, b, spec)
	rec, err := readRecord(b.dir(spec.ID))
	if err != nil || rec.QEMU == nil || rec.Device == nil {
		t.Fatalf("record: %+v %v", rec, err)
	}
	for _, p := range []struct {
		what   string
		id     ProcIdentity
		bin    string
		ownPID bool
	}{{"QEMU", *rec.QEMU, b.qemuBin, true}, {"vhost-device-vsock", *rec.Device, b.devBin, false}} {
		t.Run(p.what, func(t *testing.T) {
			checkVMMProcess(t, p.id.Pid, p.bin, p.ownPID, cfg.StateDir)
			if p.id.Exe != p.bin {
				t.Errorf("recorded executable %q, want %q (the identity is taken after the helper's exec)", p.id.Exe, p.bin)
			}
			// Our filter, and for QEMU its own -sandbox filter stacked on it.
			if seccomp := statusField(t, p.id.Pid, "Seccomp"); seccomp != "2" {
				t.Errorf("Seccomp: %s, want 2 (filter mode)", seccomp)
			}
			if n, want := statusField(t, p.id.Pid, "Seccomp_filters"), map[bool]string{true: "2", false: "1"}[p.ownPID]; n != want {
				t.Errorf("Seccomp_filters: %s, want %s", n, want)
			}
			if cfg.Cgroups != nil {
				name, _ := cgroups.GroupName(cgroups.KindVM, spec.ID)
				g, err := m.Load(name)
				if err != nil || !g.Contains(p.id.Pid) {
					t.Errorf("pid %d is not in the VM's cgroup %s: %v", p.id.Pid, name, err)
				}
			}
		})
	}
}

// vmmProbeEnv makes the test binary, exec'd by the VMM sandbox as its program, try what
// the profile must refuse and print one "name errno" line per attempt.
const vmmProbeEnv = "WORKBENCH_VMM_PROBE"

func init() {
	if os.Getenv(vmmProbeEnv) != "1" || os.Getenv(vmmSandboxEnv) != "" {
		return
	}
	errno := func(err error) string {
		if err == nil {
			return "allowed"
		}
		var e unix.Errno
		if errors.As(err, &e) {
			return unix.ErrnoName(e)
		}
		return err.Error()
	}
	sock := func(domain, typ int) error {
		fd, err := unix.Socket(domain, typ, 0)
		if err == nil {
			_ = unix.Close(fd)
		}
		return err
	}
	pair := func(domain int) error {
		fds, err := unix.Socketpair(domain, unix.SOCK_STREAM, 0)
		if err == nil {
			_ = unix.Close(fds[0])
			_ = unix.Close(fds[1])
		}
		return err
	}
	open := func(p string) error {
		f, err := os.Open(p)
		if err == nil {
			_ = f.Close()
		}
		return err
	}
	for _, a := range []struct {
		name string
		err  error
	}{
		{"socket-unix", sock(unix.AF_UNIX, unix.SOCK_STREAM)},
		{"socketpair-unix", pair(unix.AF_UNIX)},
		{"socket-inet", sock(unix.AF_INET, unix.SOCK_STREAM)},
		{"socket-inet6", sock(unix.AF_INET6, unix.SOCK_DGRAM)},
		{"socket-netlink", sock(unix.AF_NETLINK, unix.SOCK_RAW)},
		{"socket-packet", sock(unix.AF_PACKET, unix.SOCK_RAW)},
		{"socket-vsock", sock(unix.AF_VSOCK, unix.SOCK_STREAM)},
		{"socketpair-inet", pair(unix.AF_INET)},
		{"mount", unix.Mount("tmpfs", "/dev", "tmpfs", 0, "")},
		{"unshare-user", unix.Unshare(unix.CLONE_NEWUSER)},
		{"setuid-0", unix.Setresuid(0, 0, 0)},
		{"kexec", unix.KexecFileLoad(-1, -1, "", 0)},
		{"bpf", func() error { _, _, e := unix.Syscall(unix.SYS_BPF, 0, 0, 0); return errnoOrNil(e) }()},
		{"open-shadow", open("/etc/shadow")},
		{"open-root", open("/root")},
		{"mknod", unix.Mknod("/dev/x", unix.S_IFCHR|0o600, int(unix.Mkdev(1, 3)))},
	} {
		fmt.Printf("%s %s\n", a.name, errno(a.err))
	}
	os.Exit(0)
}

func errnoOrNil(e unix.Errno) error {
	if e == 0 {
		return nil
	}
	return e
}

// TestVMMSandboxRefusesPrivilegedOperations runs a probe as the VMM program (this test
// binary, exec'd by the sandbox helper as the VMM uid): AF_UNIX sockets work, every other
// socket family (only seccomp can refuse AF_INET: the device shares the host's network
// namespace), mount, user namespaces, setuid(0), kexec, bpf and mknod are refused, and
// /etc/shadow and /root do not exist.
func TestVMMSandboxRefusesPrivilegedOperations(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the VMM sandbox needs root (CI runs as root)")
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd := exec.Command(self)
	cmd.Env = []string{vmmProbeEnv + "=1"}
	cmd.Stdout, cmd.Stderr = &out, &out
	b := &Backend{}
	h, done, err := startProc(cmd, nil, b.vmmIdentity(), true)
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	select {
	case <-done:
	case <-time.After(time.Minute):
		_ = h.kill(killWait)
		t.Fatal("the probe did not finish")
	}
	got := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		if k, v, ok := strings.Cut(l, " "); ok {
			got[k] = v
		}
	}
	t.Logf("probe: %v", got)
	for k, want := range map[string]string{
		"socket-unix": "allowed", "socketpair-unix": "allowed",
		"socket-inet": "EPERM", "socket-inet6": "EPERM", "socket-netlink": "EPERM", "socket-packet": "EPERM",
		"socket-vsock": "EPERM", "socketpair-inet": "EPERM", "mount": "EPERM", "unshare-user": "EPERM",
		"setuid-0": "EPERM", "kexec": "EPERM", "bpf": "EPERM", "open-shadow": "ENOENT", "open-root": "ENOENT",
		"mknod": "EPERM|EROFS", // the read-only /dev answers first
	} {
		if !slices.Contains(strings.Split(want, "|"), got[k]) {
			t.Errorf("%s: %q, want %q (output %q)", k, got[k], want, out.String())
		}
	}
}

// TestVMMSandboxRefusalReported: a helper that cannot exec its program reports why, and
// nothing is left running.
func TestVMMSandboxRefusalReported(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("the VMM sandbox needs root (CI runs as root)")
	}
	missing := filepath.Join(t.TempDir(), "no-such-vmm")
	if err := os.WriteFile(missing, []byte("#!/no/such/interpreter\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	b := &Backend{}
	_, _, err := startProc(exec.Command(missing), nil, b.vmmIdentity(), false)
	if err == nil || !strings.Contains(err.Error(), "VMM sandbox: exec "+missing) {
		t.Fatalf("start of an unrunnable program: %v", err)
	}
}

func statusField(t *testing.T, pid int, key string) string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok && k == key {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no %s in /proc/%d/status", key, pid)
	return ""
}

// checkVMMProcess asserts the confinement of a running VMM process (read from the host).
func checkVMMProcess(t *testing.T, pid int, bin string, ownPID bool, stateDir string) {
	t.Helper()
	uid := fmt.Sprint(DefaultVMMUID)
	for key, want := range map[string]string{
		"Uid": uid + "\t" + uid + "\t" + uid + "\t" + uid, "Gid": uid + "\t" + uid + "\t" + uid + "\t" + uid,
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1",
	} {
		if got := statusField(t, pid, key); got != want {
			t.Errorf("%s: %q, want %q", key, got, want)
		}
	}
	if exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid)); err != nil || exe != bin {
		t.Errorf("exe %q (%v), want %q", exe, err, bin)
	}
	nss := []string{"mnt", "ipc", "uts"}
	if ownPID {
		nss = append(nss, "pid")
	}
	for _, ns := range nss {
		mine, err1 := os.Readlink("/proc/self/ns/" + ns)
		its, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err := errors.Join(err1, err2); err != nil || mine == its {
			t.Errorf("%s namespace shared with the agent (%s): %v", ns, its, err)
		}
	}
	// Its root, seen from the host: the agent's state dir, /root and the host's other
	// trees do not exist there; the system set is read-only.
	root := fmt.Sprintf("/proc/%d/root", pid)
	for _, p := range []string{stateDir, "/root", "/home", "/var", "/run", "/sys", "/etc/shadow", "/etc/passwd", "/tmp"} {
		if strings.HasPrefix(bin, p+"/") {
			// The program is bound at its own path (a checkout under /tmp, say): the
			// directory exists there, holding nothing but the way to the binary.
			rest := strings.TrimPrefix(bin, p+"/")
			entries, err := os.ReadDir(root + p)
			if err != nil || len(entries) != 1 || entries[0].Name() != strings.SplitN(rest, "/", 2)[0] {
				t.Errorf("%s holds more than the way to its binary %s: %v %v", p, bin, entries, err)
			}
			continue
		}
		if _, err := os.Lstat(root + p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s exists in its root (%v)", p, err)
		}
	}
	if _, err := os.Stat(root + bin); err != nil {
		t.Errorf("its own binary is not in its root: %v", err)
	}
	for _, p := range []string{"/", "/usr", "/dev"} {
		var st unix.Statfs_t
		if err := unix.Statfs(root+p, &st); err != nil || st.Flags&unix.ST_RDONLY == 0 {
			t.Errorf("%s is not read-only in its root (flags %#x, %v)", p, st.Flags, err)
		}
	}
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("mountinfo of pid %d:\n%s", pid, mi)
	for _, l := range strings.Split(strings.TrimSpace(string(mi)), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 {
			continue
		}
		mp, opts := f[4], f[5]
		switch {
		case strings.Contains(l, stateDir) || strings.HasPrefix(mp, "/root") || strings.HasPrefix(mp, "/home") || strings.HasPrefix(mp, "/var"):
			t.Errorf("mountinfo names a host tree: %s", l)
		case mp == "/proc" || strings.HasPrefix(mp, "/dev/"): // proc; the device files (nosuid, noexec)
		case !strings.Contains(","+opts+",", ",ro,"):
			t.Errorf("mount %s is not read-only: %s", mp, l)
		}
	}
	its, err1 := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	mine, err2 := os.ReadFile("/proc/self/cgroup")
	if err := errors.Join(err1, err2); err != nil || string(its) == string(mine) {
		t.Errorf("cgroup shared with the agent: %s (%v)", its, err)
	}
}

// BenchmarkVMMSandboxStart: the start cost of the VMM sandbox (helper clone into its
// namespaces, root built, privileges dropped, seccomp, exec) against a bare fork/exec,
// both of /bin/true to its exit, one sample of each per iteration, interleaved.
func BenchmarkVMMSandboxStart(b *testing.B) {
	if os.Geteuid() != 0 {
		b.Skip("the VMM sandbox needs root")
	}
	id := (&Backend{}).vmmIdentity()
	var bare, boxed []time.Duration
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		if err := exec.Command("/bin/true").Run(); err != nil {
			b.Fatal(err)
		}
		bare = append(bare, time.Since(t0))
		t0 = time.Now()
		h, done, err := startProc(exec.Command("/bin/true"), nil, id, true)
		if err != nil {
			b.Fatal(err)
		}
		<-done
		boxed = append(boxed, time.Since(t0))
		h.close()
	}
	b.ReportMetric(msOf(p50(bare)), "p50-bare-ms")
	b.ReportMetric(msOf(p50(boxed)), "p50-vmm-sandbox-ms")
	b.ReportMetric(float64(p50(boxed))/float64(p50(bare)), "ratio-to-bare")
}
