package procexec

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	seccompbpf "github.com/elastic/go-seccomp-bpf"
	"golang.org/x/sys/unix"
)

// TestSeccompPolicyDeniesRequired: the Docker-default-derived policy allows none of the
// syscalls the sandbox must block, and socket(2) only for families other than AF_UNIX,
// AF_NETLINK, AF_PACKET and AF_VSOCK.
func TestSeccompPolicyDeniesRequired(t *testing.T) {
	pol, err := SeccompPolicy()
	if err != nil {
		t.Fatal(err)
	}
	allowed := map[string]bool{}
	var socketFams []uint64
	for _, g := range pol.Syscalls {
		if g.Action != seccompbpf.ActionAllow {
			t.Fatalf("unexpected group action %v", g.Action)
		}
		for _, n := range g.Names {
			allowed[n] = true
		}
		for _, n := range g.NamesWithCondtions {
			if n.Name == "socket" {
				if len(n.Conditions) != 1 || n.Conditions[0].Operation != seccompbpf.Equal {
					t.Fatalf("socket rule %+v", n)
				}
				socketFams = append(socketFams, n.Conditions[0].Value)
				continue
			}
			allowed[n.Name] = true
		}
	}
	for _, n := range []string{
		"mount", "umount2", "pivot_root", "init_module", "finit_module", "delete_module", "kexec_load",
		"kexec_file_load", "reboot", "bpf", "perf_event_open", "keyctl", "add_key", "request_key",
		"ptrace", "process_vm_readv", "process_vm_writev", "open_by_handle_at", "userfaultfd",
		"setns", "unshare", "io_uring_setup", "io_uring_enter", "io_uring_register", "socketpair",
		"clone3", "swapon", "acct", "settimeofday", "clock_settime",
		"sethostname", "setdomainname", "mount_setattr", "move_mount", "open_tree", "fsopen", "fsmount",
		"quotactl", "lookup_dcookie", "iopl", "ioperm", "syslog",
		"mknod", "mknodat", "openat2",
	} {
		if allowed[n] {
			t.Errorf("%s is allowed", n)
		}
	}
	for _, f := range []uint64{unix.AF_UNIX, unix.AF_NETLINK, unix.AF_PACKET, unix.AF_VSOCK} {
		if slices.Contains(socketFams, f) {
			t.Errorf("socket family %d is allowed", f)
		}
	}
	if !slices.Contains(socketFams, unix.AF_INET) || !slices.Contains(socketFams, unix.AF_INET6) {
		t.Errorf("socket families %v lack AF_INET/AF_INET6", socketFams)
	}
	if !allowed["clone"] || !allowed["execve"] || !allowed["read"] {
		t.Error("basic syscalls missing from the allow list")
	}
	if _, err := seccompProgram(); err != nil {
		t.Fatal(err)
	}
}

// TestSandboxIdentity: inside, the program is uid 0 of its own user namespace mapped to
// the unprivileged sandbox uid, with every capability set empty, no_new_privs, a seccomp
// filter, and its own user, PID, mount, UTS, IPC, network and cgroup namespaces.
func TestSandboxIdentity(t *testing.T) {
	requireSandbox(t)
	script := `grep -E '^(Cap(Inh|Prm|Eff|Bnd|Amb)|NoNewPrivs|Seccomp):' /proc/self/status
cat /proc/self/uid_map /proc/self/gid_map
for n in user pid mnt uts ipc net cgroup; do echo "ns $n $(readlink /proc/self/ns/$n)"; done
echo "hostname $(cat /proc/sys/kernel/hostname)"
echo "procs $(ls -d /proc/[0-9]* | wc -l)"
echo "init $(cat /proc/1/comm)"
for p in /etc/shadow /root /var /run /sys /home; do test -e $p && echo "visible $p"; done
echo end`
	res := run(t, Spec{Argv: []string{"/bin/sh", "-c", script}})
	out := string(res.Output)
	for _, want := range []string{
		"CapInh:\t0000000000000000", "CapPrm:\t0000000000000000", "CapEff:\t0000000000000000",
		"CapBnd:\t0000000000000000", "CapAmb:\t0000000000000000", "NoNewPrivs:\t1", "Seccomp:\t2",
		"hostname " + SandboxHostname, "init sandbox-init", "end",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in:\n%s", want, out)
		}
	}
	if strings.Contains(out, "visible ") {
		t.Errorf("host paths visible:\n%s", out)
	}
	maps := 0
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && f[0] == "0" {
			if f[1] != fmt.Sprint(DefaultSandboxUID) || f[2] != "1" {
				t.Errorf("id map %q: want 0 -> %d (1)", line, DefaultSandboxUID)
			}
			maps++
		}
		if len(f) == 3 && f[0] == "ns" {
			host, err := os.Readlink("/proc/self/ns/" + f[1])
			if err != nil || host == f[2] {
				t.Errorf("namespace %s is the host's (%s, %v)", f[1], f[2], err)
			}
		}
		// The helper, the shell and the pipeline's processes: nothing of the host.
		if n, err := strconv.Atoi(strings.TrimPrefix(line, "procs ")); err == nil && (n < 2 || n > 6) {
			t.Errorf("the sandbox sees %d processes in /proc", n)
		}
	}
	if maps != 2 {
		t.Errorf("found %d id maps in:\n%s", maps, out)
	}
}

// TestSandboxRefusesPrivilegedOperations: harmless forms of privileged operations fail.
func TestSandboxRefusesPrivilegedOperations(t *testing.T) {
	requireSandbox(t)
	root := t.TempDir()
	script := `hostname "$(hostname)" 2>/dev/null && echo hostname-changed
mknod ./null c 1 3 2>/dev/null && echo mknod-ok
mkdir -p m && mount -t tmpfs none m 2>/dev/null && echo mount-ok
echo probe-done`
	res := run(t, Spec{Argv: []string{"/bin/sh", "-c", script}, Dir: root, WritableRoots: []string{root}})
	if got := strings.TrimSpace(string(res.Output)); got != "probe-done" {
		t.Fatalf("privileged operations: %q", got)
	}
	if _, err := os.Stat(root + "/null"); err == nil {
		t.Fatal("a device node was created in the root")
	}
}

// TestRootOwnershipThroughIdmap: the root appears owned by the sandbox's root and what
// it creates is stored as host uid 0, while the process runs as the sandbox uid.
func TestRootOwnershipThroughIdmap(t *testing.T) {
	requireSandbox(t)
	root := t.TempDir()
	if err := os.Chmod(root, 0o700); err != nil {
		t.Fatal(err)
	}
	res := run(t, Spec{Argv: []string{"/bin/sh", "-c", `stat -c '%u:%g' . && echo x > f && echo wrote`}, Dir: root, WritableRoots: []string{root}})
	if got := strings.TrimSpace(string(res.Output)); got != "0:0\nwrote" {
		t.Fatalf("output %q", got)
	}
	var st unix.Stat_t
	if err := unix.Stat(root+"/f", &st); err != nil || st.Uid != 0 || st.Gid != 0 {
		t.Fatalf("created file: uid %d gid %d err %v", st.Uid, st.Gid, err)
	}
}

// TestReadableRootIsReadOnly: a readable root is mounted read-only.
func TestReadableRootIsReadOnly(t *testing.T) {
	requireSandbox(t)
	ro := t.TempDir()
	res := run(t, Spec{Argv: []string{"/bin/sh", "-c", `ls -d . && touch x 2>/dev/null || echo denied`}, Dir: ro, ReadableRoots: []string{ro}})
	if got := strings.TrimSpace(string(res.Output)); got != ".\ndenied" {
		t.Fatalf("output %q", got)
	}
	_ = context.Background
}

// BenchmarkSandboxStartCost measures start→exit of /bin/true three ways in the same run,
// interleaved sample by sample so machine load affects all alike: a bare fork/exec (the
// floor), the full sandbox through the dedicated helper binary (what the agent uses,
// cmd/workbench-sandbox) and through the test binary re-executed as helper. It reports
// p50/p99 of each from the samples and the sandbox's p50 as a ratio to the floor's.
func BenchmarkSandboxStartCost(b *testing.B) {
	requireSandbox(b)
	slim := NewRunner(Limits{HelperPath: slimHelper(b)})
	fat := NewRunner(Limits{})
	// With a cgroup per command (as the agent runs them), started on demand and pre-started.
	_, cgm := cgroupRunner(b)
	withCg := NewRunner(Limits{HelperPath: slimHelper(b), Cgroups: cgm})
	pooled := NewRunner(Limits{HelperPath: slimHelper(b), Cgroups: cgm, PrestartedSandboxes: 1})
	b.Cleanup(pooled.Close)
	if err := pooled.Warm(); err != nil {
		b.Fatal(err)
	}
	ctx := context.Background()
	var bare, slimS, fatS, cgS, poolS []time.Duration
	for b.Loop() {
		t0 := time.Now()
		cmd := exec.Command("/bin/true")
		cmd.Env = []string{}
		if err := cmd.Run(); err != nil {
			b.Fatal(err)
		}
		bare = append(bare, time.Since(t0))
		for _, s := range []struct {
			r   *Runner
			out *[]time.Duration
		}{{slim, &slimS}, {fat, &fatS}, {withCg, &cgS}, {pooled, &poolS}} {
			t0 = time.Now()
			res, err := s.r.Run(ctx, Spec{Argv: []string{"/bin/true"}})
			if err != nil || res.ExitCode != 0 {
				b.Fatal(res, err)
			}
			*s.out = append(*s.out, time.Since(t0))
		}
	}
	q := func(d []time.Duration, p float64) float64 {
		s := slices.Clone(d)
		slices.Sort(s)
		return float64(s[min(len(s)-1, int(p*float64(len(s))))].Microseconds()) / 1000
	}
	b.ReportMetric(q(bare, 0.5), "bare-p50-ms")
	b.ReportMetric(q(bare, 0.99), "bare-p99-ms")
	b.ReportMetric(q(slimS, 0.5), "sandbox-p50-ms")
	b.ReportMetric(q(slimS, 0.99), "sandbox-p99-ms")
	b.ReportMetric(q(fatS, 0.5), "sandbox-selfexec-p50-ms")
	b.ReportMetric(q(fatS, 0.99), "sandbox-selfexec-p99-ms")
	b.ReportMetric(q(cgS, 0.5), "sandbox-cgroup-p50-ms")
	b.ReportMetric(q(cgS, 0.99), "sandbox-cgroup-p99-ms")
	b.ReportMetric(q(poolS, 0.5), "sandbox-cgroup-prestarted-p50-ms")
	b.ReportMetric(q(poolS, 0.99), "sandbox-cgroup-prestarted-p99-ms")
	b.ReportMetric(q(slimS, 0.5)/q(bare, 0.5), "sandbox/bare-p50")
	b.ReportMetric(q(cgS, 0.5)/q(bare, 0.5), "sandbox-cgroup/bare-p50")
	b.ReportMetric(q(poolS, 0.5)/q(bare, 0.5), "sandbox-cgroup-prestarted/bare-p50")
}

// TestPathToRootIsTraverseOnly: the directories above a root exist only to reach it and
// cannot be listed or opened.
func TestPathToRootIsTraverseOnly(t *testing.T) {
	requireSandbox(t)
	base := t.TempDir()
	root := base + "/state/envs/e1/root"
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+"/state/secret", []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	res := run(t, Spec{Argv: []string{"/bin/sh", "-c", `ls "$1" >/dev/null 2>&1 && echo listed; cat "$1/secret" 2>/dev/null && echo read; cd "$2" && echo reached`, "sh", base + "/state", root},
		WritableRoots: []string{root}, Dir: root})
	if got := strings.TrimSpace(string(res.Output)); got != "reached" {
		t.Fatalf("output %q", got)
	}
}
