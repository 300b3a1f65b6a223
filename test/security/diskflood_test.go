package security

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends/fixturecopy"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/platform/loopdisk"
	"sensorium.dev/workbench/internal/test/nodeagenttest"

	"sensorium.dev/workbench/internal/test/kstate"
)

// The disk-flood attacks run on an agent of their own (node diskNode) whose storage bounds
// are small enough to reach in a test: a 96 MiB node reservation, 40 MiB default disks,
// a 16 MiB /tmp per sandbox and an 8 MiB RLIMIT_FSIZE.
const (
	diskNode       = "node-disk"
	diskReserveMiB = 96
	diskDefaultMiB = 40
	diskTenantMiB  = 32
	diskTmpMiB     = 16
	diskMaxFileMiB = 8
)

// The hostile repository's Makefile: each target is repository code run by make.
//
// The floods write 4 MiB files (below RLIMIT_FSIZE) until a write fails, then report the
// total written.
const diskMakefile = `diskflood:
	i=0; while [ $$i -lt 16 ]; do i=$$((i+1)); head -c 4194304 /dev/zero > flood$$i || break; done; echo "flood-files=$$i"; echo "flood-size=$$(cat flood* | wc -c)"
tmpflood:
	i=0; while [ $$i -lt 6 ]; do i=$$((i+1)); head -c 4194304 /dev/zero > /tmp/flood$$i || break; done; echo "tmp-files=$$i"; echo "tmp-size=$$(cat /tmp/flood* | wc -c)"
bigfile:
	head -c 12582912 /dev/zero > big; echo "big-rc=$$?"; stat -c "big-size=%s" big; rm -f big
small:
	echo tenant-ok > note && cat note
ptybig:
	head -c 12582912 /dev/zero > ptybig; echo "pty-rc=$$?"; stat -c "pty-size=%s" ptybig; rm -f ptybig; echo pty-done; exec sleep 120
`

// diskRepo is a fresh repository with diskMakefile inside the admitted root.
func diskRepo(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp(workspace, "disk-")
	must(t, err)
	must(t, os.Chmod(d, 0o755))
	must(t, os.WriteFile(filepath.Join(d, "Makefile"), []byte(diskMakefile), 0o644))
	return d
}

// startDiskAgent runs the diskNode agent until the test ends, then releases what it left.
func startDiskAgent(t *testing.T) (*agent.Agent, string) {
	t.Helper()
	state := filepath.Join(tmp, "state-disk")
	cfg := agent.Config{NodeName: diskNode, StateDir: state, AdmittedRoots: map[string]string{"work": workspace}, HeartbeatSeconds: 2,
		Caps:    agent.Caps{Sessions: 16, SessionsPerEnvironment: 4},
		Storage: &agent.StorageConfig{MaxMiB: diskReserveMiB, DefaultDiskMiB: diskDefaultMiB, TmpMiB: diskTmpMiB, MaxFileMiB: diskMaxFileMiB}}
	ctx, cancel := context.WithCancel(context.Background())
	a, done, err := nodeagenttest.StartWithDone(ctx, env, cfg, agent.Options{SharedProcess: true})
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cancel()
		select {
		case <-done:
		case <-time.After(nodeagenttest.AgentStopTimeout):
			t.Errorf("the agent of %s did not stop", diskNode)
		}
		if err := nodeagenttest.Release(cfg); err != nil {
			t.Error(err)
		}
	})
	real, err := filepath.EvalSymlinks(state)
	must(t, err)
	return a, real
}

// diskEnvironment creates environment e with session s and the make profiles in ns on
// diskNode; wait says whether to wait for both to run.
func diskEnvironment(t *testing.T, ns, dir string, backend wbv1.BackendID, res *wbv1.EnvironmentResources, wait bool) {
	t.Helper()
	ctx := context.Background()
	createEnvironment(t, ns, dir, backend, res, diskNode)
	prof := makeProfile(ns, "make", []string{"-s"}, false)
	prof.Spec.AllowedArgPrefixes = []string{"diskflood", "tmpflood", "bigfile", "small"}
	must(t, env.Client.Create(ctx, prof))
	must(t, env.Client.Create(ctx, makeProfile(ns, "make-pty", []string{"-s", "ptybig"}, true)))
	if !wait {
		return
	}
	must(t, env.Client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e"}}))
	waitReadyAndRunning(t, ns, "environment Ready and session Running on "+diskNode)
}

// runOn runs `make -s target` in ns's session on a and returns the command and its output.
func runOn(t *testing.T, a *agent.Agent, ns, name, target string) (*wbv1.TerminalCommand, string) {
	t.Helper()
	return runSpec(t, a, ns, name, wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "make", Argv: []string{"/usr/bin/make", "-s", target},
		Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: 60, OutputBytes: outputCap})
}

// field returns the integer after "name=" in out (-1 if none).
func field(out, name string) int64 {
	m := regexp.MustCompile(regexp.QuoteMeta(name) + `=(\d+)`).FindStringSubmatch(out)
	if m == nil {
		return -1
	}
	n, _ := strconv.ParseInt(m[1], 10, 64)
	return n
}

// diskLeftovers lists the loop devices and mounts of the disk agent's state dir.
func diskLeftovers(t *testing.T, state string) []string {
	t.Helper()
	loops, err := loopdisk.LoopsBackedBy(filepath.Join(state, fixturecopy.DisksDir))
	must(t, err)
	ms, err := loopdisk.MountsUnder(state)
	must(t, err)
	for _, m := range ms {
		loops = append(loops, m.Point+" ("+m.Source+")")
	}
	return loops
}

func deleteEnvironment(t *testing.T, ns string) {
	t.Helper()
	ctx := context.Background()
	_ = env.Client.Delete(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}})
	eventually(t, 60*time.Second, "environment "+ns+"/e deleted", func() (bool, string) {
		var e wbv1.Environment
		err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e"}, &e)
		return client.IgnoreNotFound(err) == nil && err != nil, fmt.Sprintf("%+v", e.Status)
	})
}

// TestDiskFloodBounded: a hostile repository's build fills what it can write.
//   - On fixture-copy.v1 its copy lives on a disk of resources.diskMiB: the flood gets
//     ENOSPC below that size, the state filesystem receives at most that much, a second
//     tenant on another environment still runs, the store still records outcomes, and the
//     WorkbenchNode reports the reservation's use.
//   - A third environment that would overcommit the node's reservation is refused
//     storage-exhausted.
//   - /tmp is bounded (ENOSPC at storage.tmpMiB) and one file past storage.maxFileMiB gets
//     EFBIG, for a command and for a PTY program, on host-local.
//   - Teardown leaves no loop device and no mount.
func TestDiskFloodBounded(t *testing.T) {
	requireProcessSandbox(t)
	if os.Geteuid() != 0 {
		t.Skip("needs root (loop devices, mounts), as CI runs")
	}
	if err := loopdisk.Check(); err != nil {
		t.Skipf("this machine cannot make loop disks: %v", err)
	}
	ctx := context.Background()
	da, state := startDiskAgent(t)

	nsA, nsB, nsC, nsH := namespace(t), namespace(t), namespace(t), namespace(t)
	diskEnvironment(t, nsH, diskRepo(t), wbv1.BackendHostLocal, nil, true)
	t.Run("tmp flood bounded", func(t *testing.T) {
		c, out := runOn(t, da, nsH, "tmp", "tmpflood")
		size := field(out, "tmp-size")
		if !strings.Contains(out, "No space left on device") || size < 0 || size > diskTmpMiB<<20 {
			t.Fatalf("a 24 MiB write to a %d MiB /tmp: %q (phase %s), want ENOSPC", diskTmpMiB, out, c.Status.Phase)
		}
	})
	t.Run("RLIMIT_FSIZE gives EFBIG to a command", func(t *testing.T) {
		c, out := runOn(t, da, nsH, "big", "bigfile")
		if !strings.Contains(out, "File too large") || field(out, "big-size") != diskMaxFileMiB<<20 || c.Status.Phase != wbv1.CommandSucceeded {
			t.Fatalf("a 12 MiB file under a %d MiB RLIMIT_FSIZE: %q (%+v), want EFBIG at the limit", diskMaxFileMiB, out, c.Status)
		}
	})
	t.Run("RLIMIT_FSIZE gives EFBIG to a PTY program", func(t *testing.T) {
		must(t, env.Client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "pty", Namespace: nsH},
			Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e", ShellProfileRef: ptr(wbv1.ObjectName("make-pty")), RawInput: wbv1.RawInputOperatorOnly}}))
		var s wbv1.TerminalSession
		eventually(t, 60*time.Second, "the PTY session running", func() (bool, string) {
			must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: nsH, Name: "pty"}, &s))
			if s.Status.Refusal != nil || s.Status.Phase == wbv1.SessionClosed || s.Status.Phase == wbv1.SessionFailed {
				t.Fatalf("the PTY session did not run: %+v", s.Status)
			}
			return s.Status.Phase == wbv1.SessionRunning, fmt.Sprintf("%+v", s.Status)
		})
		var out string
		eventually(t, 60*time.Second, "the PTY program's report", func() (bool, string) {
			b, _, err := da.Output(string(s.UID), 1, 1<<20)
			if err != nil {
				return false, err.Error()
			}
			out = string(b)
			return strings.Contains(out, "pty-done"), out
		})
		if !strings.Contains(out, "File too large") || field(out, "pty-size") != diskMaxFileMiB<<20 {
			t.Fatalf("a 12 MiB file from a PTY program under a %d MiB RLIMIT_FSIZE: %q, want EFBIG", diskMaxFileMiB, out)
		}
		closeSession(t, nsH, "pty")
	})

	// Tenant A: fixture-copy with diskMiB; tenant B: fixture-copy with the node default.
	diskEnvironment(t, nsA, diskRepo(t), wbv1.BackendFixtureCopy, &wbv1.EnvironmentResources{DiskMiB: ptr(int32(diskTenantMiB))}, true)
	diskEnvironment(t, nsB, diskRepo(t), wbv1.BackendFixtureCopy, nil, true)

	t.Run("fixture-copy flood gets ENOSPC, second tenant served", func(t *testing.T) {
		c, out := runOn(t, da, nsA, "flood", "diskflood")
		t.Logf("flood: phase %s, output %q", c.Status.Phase, tail(out))
		size := field(out, "flood-size")
		if !strings.Contains(out, "No space left on device") || size < 0 || size >= diskTenantMiB<<20 {
			t.Fatalf("a 64 MiB write on a %d MiB disk: %q (phase %s), want ENOSPC below the bound", diskTenantMiB, out, c.Status.Phase)
		}
		var e wbv1.Environment
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: nsA, Name: "e"}, &e))
		var st syscall.Stat_t
		must(t, syscall.Stat(filepath.Join(state, fixturecopy.DisksDir, string(e.UID)+loopdisk.ImageSuffix), &st))
		if st.Blocks*512 > diskTenantMiB<<20 {
			t.Errorf("the state filesystem holds %d bytes for a %d MiB disk", st.Blocks*512, diskTenantMiB)
		}
		// The other tenant (whose disk is not full) runs, and its outcome is recorded.
		c, out = runOn(t, da, nsB, "b", "small")
		if c.Status.Phase != wbv1.CommandSucceeded || !strings.Contains(out, "tenant-ok") {
			t.Fatalf("the second tenant after the flood: %+v %q", c.Status, out)
		}
		eventually(t, 30*time.Second, "WorkbenchNode reports the reservation", func() (bool, string) {
			var wn wbv1.WorkbenchNode
			must(t, env.Client.Get(ctx, client.ObjectKey{Name: diskNode}, &wn))
			s := wn.Status.Storage
			// The suite's workspace shares the state directory's filesystem: the node says so.
			iso := meta.FindStatusCondition(wn.Status.Conditions, agent.ConditionStorageIsolated)
			if iso == nil || iso.Status != metav1.ConditionFalse || !strings.Contains(iso.Message, "work") {
				return false, fmt.Sprintf("StorageIsolated %+v", iso)
			}
			return s != nil && s.CapacityMiB == diskReserveMiB && s.UsedMiB == diskTenantMiB+diskDefaultMiB && s.Disks == 2 &&
				s.TmpMiB == diskTmpMiB && s.MaxFileMiB == diskMaxFileMiB, fmt.Sprintf("%+v", s)
		})
		var bc wbv1.BackendCapability
		must(t, env.Client.Get(ctx, client.ObjectKey{Name: diskNode + "." + fixturecopy.ID}, &bc))
		if !slices.Contains(bc.Spec.ResourceEnforcement, "host-storage") {
			t.Errorf("fixture-copy.v1 does not attest host-storage: %v", bc.Spec.ResourceEnforcement)
		}
		must(t, env.Client.Get(ctx, client.ObjectKey{Name: diskNode + "." + string(wbv1.BackendHostLocal)}, &bc))
		if slices.Contains(bc.Spec.ResourceEnforcement, "host-storage") {
			t.Errorf("host-local claims host-storage: %v", bc.Spec.ResourceEnforcement)
		}
	})

	t.Run("reservation exhausted", func(t *testing.T) {
		diskEnvironment(t, nsC, diskRepo(t), wbv1.BackendFixtureCopy, nil, false)
		eventually(t, 30*time.Second, "the third environment refused storage-exhausted", func() (bool, string) {
			return kstate.EnvironmentNotReady(t, env.Client, nsC, "e", func(m string) bool { return strings.HasPrefix(m, "storage-exhausted:") })
		})
	})

	t.Run("teardown leaves no loop device or mount", func(t *testing.T) {
		if ms, err := loopdisk.MountsUnder(state); err != nil || len(ms) != 2 {
			t.Fatalf("before teardown: %v %v, want the two tenants' disks mounted", ms, err)
		}
		for _, ns := range []string{nsA, nsB, nsC, nsH} {
			deleteEnvironment(t, ns)
		}
		eventually(t, 30*time.Second, "no loop device or mount left", func() (bool, string) {
			l := diskLeftovers(t, state)
			return len(l) == 0, fmt.Sprintf("%v", l)
		})
		ents, err := os.ReadDir(filepath.Join(state, fixturecopy.DisksDir))
		if err != nil || len(ents) != 0 {
			t.Fatalf("images left: %v %v", ents, err)
		}
	})
}
