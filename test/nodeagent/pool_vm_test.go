package nodeagent

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends/qemumicrovm"
	"sensorium.dev/workbench/internal/guestclient"
)

// requireFreshGuestImage skips when bin/guest was built from another guest protocol than
// this tree's (the VM pool needs the guest's rebind operation).
func requireFreshGuestImage(t *testing.T) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(repoRoot(), "bin", "guest", "digests.txt"))
	if err != nil {
		t.Skipf("bin/guest/digests.txt: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == "protocol" {
			if f[1] != protocol.SchemaDigest() {
				t.Skipf("bin/guest is stale: its agent speaks protocol %s, this tree %s (run make guest-image)", f[1], protocol.SchemaDigest())
			}
			return
		}
	}
	t.Skip("bin/guest/digests.txt names no protocol digest: run make guest-image")
}

func vmRecord(t *testing.T, uid types.UID) *qemumicrovm.Record {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(stateDir, "vms", string(uid), qemumicrovm.RecordName))
	must(t, err)
	var r qemumicrovm.Record
	must(t, json.Unmarshal(raw, &r))
	return &r
}

// cgroupOf returns the cgroup paths /proc/<pid>/cgroup names.
func cgroupOf(t *testing.T, pid int) string {
	t.Helper()
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	must(t, err)
	return string(raw)
}

// TestPoolVMClaimAdoptsRunningGuest: a qemu-microvm.v1 pool member boots and handshakes; a
// claimer adopts that running guest without a second boot — the QEMU process is the
// member's, now in the claimer's cgroup and VM directory, bound to the claimer with the
// generation advanced and a fresh nonce (the member's nonce is refused), nothing of the
// member's session left — and a command runs in the adopted guest. Deleting the claimer
// ends that QEMU.
func TestPoolVMClaimAdoptsRunningGuest(t *testing.T) {
	requireQEMU(t)
	requireFreshGuestImage(t)
	ctx := context.Background()
	ns := namespace(t)
	image := applyImageManifest(t)
	iso := wbv1.IsolationClass("emulated-vm")
	tmpl := wbv1.EnvironmentSpec{
		Backend: wbv1.BackendQEMUMicroVM, Requirements: &wbv1.EnvironmentRequirements{IsolationClass: &iso},
		Roots: []wbv1.EnvironmentRoot{{Name: "repo"}}, ImageRef: ptr(image),
		Resources:    &wbv1.EnvironmentResources{VCPUs: ptr(int32(1)), MemoryMiB: ptr(int32(512))},
		NodeSelector: map[string]string{wbv1.NodeLabel: nodeName},
	}
	createPool(t, ns, "vmpool", 1, tmpl)
	var member wbv1.Environment
	eventually(t, 240*time.Second, "the pool's VM member Ready", func() (bool, string) {
		for _, m := range members(t, ns, "vmpool") {
			if m.Status.Phase == wbv1.EnvironmentReady && m.Labels[wbv1.PoolClaimedByLabel] == "" {
				member = m
				return true, ""
			}
		}
		return false, fmt.Sprintf("%d members", len(members(t, ns, "vmpool")))
	})
	mrec := vmRecord(t, member.UID)
	if mrec.QEMU == nil || mrec.State != qemumicrovm.StateRunning {
		t.Fatalf("member record %+v", mrec)
	}
	qemuPid := mrec.QEMU.Pid

	// Someone with access to the pool's namespace runs a session and a command on the
	// member before the claim: the file stays in the guest, the session does not.
	must(t, env.Client.Create(ctx, session(ns, "ms", wbv1.ObjectName(member.Name))))
	if c := runProfiled(t, ns, "ms", "touch", 0, "/bin/touch", "member-was-here"); c.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("touch on the member: %+v", c.Status)
	}

	start := time.Now()
	must(t, env.Client.Create(ctx, claimer(ns, "claimer", "vmpool", tmpl)))
	var e wbv1.Environment
	eventually(t, 120*time.Second, "the claimer Ready", func() (bool, string) {
		get(t, ns, "claimer", &e)
		return e.Status.Phase == wbv1.EnvironmentReady, fmt.Sprintf("%+v", e.Status)
	})
	t.Logf("VM pool claim → Ready through the API server: %v", time.Since(start).Round(time.Millisecond))
	if e.Status.PoolMember == nil || e.Status.PoolMember.UID != string(member.UID) {
		t.Fatalf("the claimer did not adopt member %s: %+v", member.Name, e.Status.PoolMember)
	}
	if e.Status.SourceGeneration != member.Status.SourceGeneration+1 {
		t.Fatalf("source generation %d, member's %d", e.Status.SourceGeneration, member.Status.SourceGeneration)
	}

	// No second boot: the claimer's VM is the member's QEMU process, re-keyed.
	crec := vmRecord(t, e.UID)
	if crec.QEMU == nil || crec.QEMU.Pid != qemuPid || crec.QEMU.StartTime != mrec.QEMU.StartTime || crec.Device.Pid != mrec.Device.Pid {
		t.Fatalf("claimer's VM processes %+v/%+v, member's %+v/%+v: a second boot", crec.QEMU, crec.Device, mrec.QEMU, mrec.Device)
	}
	if err := syscall.Kill(qemuPid, 0); err != nil {
		t.Fatalf("the member's QEMU %d is gone: %v", qemuPid, err)
	}
	if exists(filepath.Join(stateDir, "vms", string(member.UID))) {
		t.Fatalf("the member's VM directory remains")
	}
	if cg := cgroupOf(t, qemuPid); !strings.Contains(cg, "vm-"+string(e.UID)) || strings.Contains(cg, "vm-"+string(member.UID)) {
		t.Fatalf("QEMU %d is in %q, want the claimer's cgroup vm-%s", qemuPid, cg, e.UID)
	}
	b := crec.Binding
	if b.EnvironmentRef != ns+"/claimer" || b.SourceGeneration != e.Status.SourceGeneration || b.BootNonce == mrec.Binding.BootNonce ||
		crec.Generation != b.SourceGeneration {
		t.Fatalf("claimer binding %+v (generation %d), member's %+v", b, crec.Generation, mrec.Binding)
	}

	// The member's binding, and the member's nonce under the claimer's binding, are refused
	// by the guest; the claimer's binding is accepted.
	ep := guestclient.Endpoint{Path: filepath.Join(stateDir, "vms", string(e.UID), "g.sock"), Hybrid: true, Port: guestclient.DefaultPort}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if _, err := guestclient.Connect(cctx, ep, mrec.Binding); guestclient.GuestCode(err) != actuation.CodeEnvironmentMismatch {
		t.Fatalf("the member's binding after adoption: %v", err)
	}
	oldNonce := b
	oldNonce.BootNonce = mrec.Binding.BootNonce
	if _, err := guestclient.Connect(cctx, ep, oldNonce); guestclient.GuestCode(err) != actuation.CodeNonceMismatch {
		t.Fatalf("the member's nonce after adoption: %v", err)
	}
	gc, err := guestclient.Connect(cctx, ep, b)
	must(t, err)
	info, err := gc.Inspect(cctx, "")
	_ = gc.Close()
	must(t, err)
	if info.Sessions != 0 || info.Processes != 0 {
		t.Fatalf("the adopted guest still holds the member's sessions or processes: %+v", info)
	}

	// A command in the adopted guest: the file the member's command made is there.
	must(t, env.Client.Create(ctx, session(ns, "s", "claimer")))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/ls", nil, nil)))
	must(t, env.Client.Create(ctx, command(ns, "ls", "/bin/ls")))
	c := waitFinal(t, ns, "ls")
	if c.Status.Phase != wbv1.CommandSucceeded || !strings.Contains(output(t, ns, c), "member-was-here") {
		t.Fatalf("ls in the adopted guest: %+v %q", c.Status, output(t, ns, c))
	}

	// Deleting the claimer ends the adopted QEMU; deleting the pool tears down its refill.
	must(t, env.Client.Delete(ctx, &e))
	waitGone(t, &e)
	eventually(t, 60*time.Second, "the adopted QEMU gone", func() (bool, string) {
		err := syscall.Kill(qemuPid, 0)
		return errors.Is(err, syscall.ESRCH), fmt.Sprintf("kill -0 %d: %v", qemuPid, err)
	})
	var p wbv1.EnvironmentPool
	get(t, ns, "vmpool", &p)
	must(t, env.Client.Delete(ctx, &p))
	waitGone(t, &p)
	eventually(t, 120*time.Second, "no VM of this namespace's environments left", func() (bool, string) {
		var l wbv1.EnvironmentList
		must(t, env.Client.List(ctx, &l, client.InNamespace(ns)))
		var left []string
		for _, x := range l.Items {
			if exists(filepath.Join(stateDir, "vms", string(x.UID))) {
				left = append(left, x.Name)
			}
		}
		return len(l.Items) == 0 || len(left) == 0, fmt.Sprintf("environments %d, with VM dirs %v", len(l.Items), left)
	})
}
