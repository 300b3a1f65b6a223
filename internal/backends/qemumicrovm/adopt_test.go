package qemumicrovm

import (
	"errors"
	"os"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
)

// TestAdoptMovesRunningVM boots a member's VM, refuses to adopt it into a plan it does not
// embody, then adopts it into a claimer: the same QEMU and vsock device, the claimer's
// directory and record, generation advanced, a fresh nonce (the member's binding refused);
// tearing the member down leaves the adopted VM running; a new backend instance (an agent
// restart) recovers the adopted VM under the claimer's id; its teardown ends it.
func TestAdoptMovesRunningVM(t *testing.T) {
	imageDir, img := vmEnv(t)
	cfg := testConfig(t, imageDir)
	b, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	from := testSpec("member", img)
	if st, err := b.Allocate(ctxT(t, 120*time.Second), from); err != nil || st.Phase != backends.PhaseReady {
		t.Fatalf("boot the member: %+v %v", st, err)
	}
	before, _ := b.Info(from.ID)
	mrec, err := readRecord(b.dir(from.ID))
	if err != nil {
		t.Fatal(err)
	}

	other := testSpec("claimer", img)
	other.MemoryMiB = 1024
	if err := b.Adopt(ctxT(t, 30*time.Second), from, other); err == nil {
		t.Fatal("adopted a VM into a plan with another memory size")
	}
	if _, ok := b.Info(from.ID); !ok {
		t.Fatal("a refused adoption moved the VM")
	}

	to := testSpec("claimer", img)
	if err := b.Adopt(ctxT(t, 60*time.Second), from, to); err != nil {
		t.Fatal(err)
	}
	after, ok := b.Info(to.ID)
	if !ok || after.QEMU != before.QEMU || after.Device != before.Device || after.Generation != before.Generation+1 {
		t.Fatalf("after adoption %+v, before %+v", after, before)
	}
	if _, ok := b.Info(from.ID); ok {
		t.Fatal("the member still has a VM")
	}
	if _, err := os.Lstat(b.dir(from.ID)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the member's directory remains: %v", err)
	}
	crec, err := readRecord(b.dir(to.ID))
	if err != nil {
		t.Fatal(err)
	}
	if crec.ID != to.ID || crec.Binding.EnvironmentRef != to.Ref || crec.Binding.BootNonce == mrec.Binding.BootNonce ||
		crec.Binding.SourceGeneration != mrec.Generation+1 {
		t.Fatalf("claimer record %+v, member's binding %+v", crec, mrec.Binding)
	}
	if st, err := b.Allocate(ctxT(t, 30*time.Second), to); err != nil || st.Generation != after.Generation {
		t.Fatalf("allocate after adoption: %+v %v", st, err)
	}
	ep := guestclient.Endpoint{Path: b.dir(to.ID) + "/" + guestSock, Hybrid: true, Port: guestclient.DefaultPort}
	if _, err := guestclient.Connect(ctxT(t, 30*time.Second), ep, mrec.Binding); guestclient.GuestCode(err) == "" {
		t.Fatalf("the member's binding after adoption: %v", err)
	}
	c, err := b.Guest(ctxT(t, 30*time.Second), to.ID)
	if err != nil {
		t.Fatal(err)
	}
	_ = c.Close()

	// The member's teardown (its object deleted once the claim settled) leaves the VM.
	if st, err := b.Teardown(ctxT(t, 60*time.Second), from); err != nil || len(st.Residue) > 0 {
		t.Fatalf("member teardown: %+v %v", st, err)
	}
	if st, err := b.Inspect(ctxT(t, 30*time.Second), to); err != nil || st.Phase != backends.PhaseReady {
		t.Fatalf("the adopted VM after the member's teardown: %+v %v", st, err)
	}

	// An agent restart recovers the adopted VM under the claimer's id.
	b2, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	acts, err := b2.Recover(ctxT(t, 60*time.Second), map[string]backends.Spec{to.ID: {ID: to.ID}})
	if err != nil {
		t.Fatal(err)
	}
	if len(acts) != 1 || acts[0].Outcome != OutcomeRecovered {
		t.Fatalf("recovery of the adopted VM: %+v", acts)
	}
	if info, ok := b2.Info(to.ID); !ok || info.QEMU != before.QEMU {
		t.Fatalf("recovered %+v, want QEMU %s", info, before.QEMU)
	}
	teardown(t, b2, to)
	gone(t, before.QEMU, before.Device)
}
