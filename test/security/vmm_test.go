package security

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends/qemumicrovm"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
)

// qemuSkip says why the suite's agent offers no qemu-microvm.v1 ("" when it does).
var qemuSkip = "the suite's agent was not started"

// vmmPids maps "qemu-system-x86_64" and "vhost-device-vsock" to the pids running for the
// environment's VM directory (named in their environment by the launch).
func vmmPids(t *testing.T, envUID string) map[string]int {
	t.Helper()
	dir := filepath.Join(stateDir, "vms", envUID)
	ents, err := os.ReadDir("/proc")
	must(t, err)
	out := map[string]int{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		exe, _ := os.Readlink("/proc/" + e.Name() + "/exe")
		base := filepath.Base(exe)
		if base != "qemu-system-x86_64" && base != "vhost-device-vsock" {
			continue
		}
		environ, _ := os.ReadFile("/proc/" + e.Name() + "/environ")
		if strings.Contains("\x00"+string(environ), "\x00WORKBENCH_VM_DIR="+dir+"\x00") {
			out[base] = pid
		}
	}
	return out
}

// TestVMMProcessesConfined: an Environment on qemu-microvm.v1 boots a real guest through
// the node agent; QEMU and vhost-device-vsock, read from the host, run as the unprivileged
// VMM uid with every capability set empty, no_new_privs and a seccomp filter, in mount,
// IPC and UTS namespaces of their own (QEMU also PID), with a root in which the agent's
// state dir, its kubeconfig, /root, /home, /var, /run, /sys and /etc/shadow do not exist
// (and no mount names them), in a cgroup that is not the agent's.
func TestVMMProcessesConfined(t *testing.T) {
	if qemuSkip != "" {
		t.Skip(qemuSkip)
	}
	ctx := context.Background()
	ns := namespace(t)
	image, err := nodeagenttest.ApplyImageManifest(ctx, env)
	must(t, err)
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "vm", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendQEMUMicroVM, Roots: []wbv1.EnvironmentRoot{{Name: "repo"}}, ImageRef: ptr(image),
		Resources:    &wbv1.EnvironmentResources{VCPUs: ptr(int32(1)), MemoryMiB: ptr(int32(512))},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName},
	}}))
	var e wbv1.Environment
	eventually(t, 300*time.Second, "VM environment Ready", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "vm"}, &e))
		return e.Status.Phase == wbv1.EnvironmentReady, fmt.Sprintf("%+v", e.Status)
	})
	defer func() {
		must(t, client.IgnoreNotFound(env.Client.Delete(ctx, &e)))
		eventually(t, 90*time.Second, "VM processes gone", func() (bool, string) {
			left := vmmPids(t, string(e.UID))
			return len(left) == 0, fmt.Sprint(left)
		})
	}()
	pids := vmmPids(t, string(e.UID))
	if len(pids) != 2 {
		t.Fatalf("VMM processes of %s: %v", e.UID, pids)
	}
	for bin, pid := range pids {
		t.Run(bin, func(t *testing.T) { checkVMMConfined(t, pid, bin == "qemu-system-x86_64", string(e.UID)) })
	}
}

func procStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	must(t, err)
	out := map[string]string{}
	for _, l := range strings.Split(string(b), "\n") {
		if k, v, ok := strings.Cut(l, ":"); ok {
			out[k] = strings.TrimSpace(v)
		}
	}
	return out
}

func checkVMMConfined(t *testing.T, pid int, ownPID bool, envUID string) {
	st := procStatus(t, pid)
	uid := strconv.Itoa(qemumicrovm.DefaultVMMUID)
	ids := uid + "\t" + uid + "\t" + uid + "\t" + uid
	for key, want := range map[string]string{"Uid": ids, "Gid": ids,
		"CapInh": "0000000000000000", "CapPrm": "0000000000000000", "CapEff": "0000000000000000",
		"CapBnd": "0000000000000000", "CapAmb": "0000000000000000", "NoNewPrivs": "1", "Seccomp": "2"} {
		if st[key] != want {
			t.Errorf("%s: %q, want %q", key, st[key], want)
		}
	}
	// The agent runs in this test process: its namespaces and cgroup are ours.
	nss := []string{"mnt", "ipc", "uts"}
	if ownPID {
		nss = append(nss, "pid")
	}
	for _, n := range nss {
		mine, err1 := os.Readlink("/proc/self/ns/" + n)
		its, err2 := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, n))
		if err := errors.Join(err1, err2); err != nil || mine == its {
			t.Errorf("%s namespace shared with the agent (%s): %v", n, its, err)
		}
	}
	root := fmt.Sprintf("/proc/%d/root", pid)
	for _, p := range []string{stateDir, kubeconfig, tmp, "/root", "/home", "/var", "/run", "/sys", "/etc/shadow"} {
		if _, err := os.Lstat(root + p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s is reachable in its root (%v)", p, err)
		}
	}
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	must(t, err)
	for _, l := range strings.Split(strings.TrimSpace(string(mi)), "\n") {
		f := strings.Fields(l)
		if len(f) < 6 {
			t.Fatalf("mountinfo line %q", l)
		}
		if strings.Contains(f[3], stateDir) || strings.Contains(f[4], stateDir) || strings.HasPrefix(f[4], "/root") || strings.HasPrefix(f[3], "/root") {
			t.Errorf("a mount names the agent's state dir or /root: %s", l)
		}
		if mp := f[4]; mp != "/proc" && !strings.HasPrefix(mp, "/dev/") && !strings.Contains(","+f[5]+",", ",ro,") {
			t.Errorf("mount %s is writable: %s", mp, l)
		}
	}
	its, err1 := os.ReadFile(fmt.Sprintf("/proc/%d/cgroup", pid))
	mine, err2 := os.ReadFile("/proc/self/cgroup")
	if err := errors.Join(err1, err2); err != nil || string(its) == string(mine) || !strings.Contains(string(its), "/vm-"+envUID+"\n") {
		t.Errorf("not in a VM cgroup of its own: %s (%v)", its, err)
	}
}
