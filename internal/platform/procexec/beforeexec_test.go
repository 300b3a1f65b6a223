package procexec

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// gatedSpec is a program that leaves a marker in dir when it runs.
func gatedSpec(dir string, gate func() error, helperPid *int) Spec {
	return Spec{
		Argv:          []string{"/bin/sh", "-c", "echo ran > " + filepath.Join(dir, "marker")},
		WritableRoots: []string{dir},
		OnSandbox:     func(pid int) error { *helperPid = pid; return nil },
		BeforeExec:    gate,
	}
}

func markerExists(t *testing.T, dir string) bool {
	t.Helper()
	_, err := os.Stat(filepath.Join(dir, "marker"))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	return err == nil
}

// checkBeforeExecGate runs the gate's two cases on r: the program runs only after BeforeExec
// returned nil (and not before it was called), and never when it returns an error — then
// Start returns that error, the helper is gone and the runner's slot is free.
func checkBeforeExecGate(t *testing.T, r *Runner) {
	dir := t.TempDir()
	var helper int
	called := false
	h, err := r.Start(context.Background(), gatedSpec(dir, func() error {
		called = true
		if markerExists(t, dir) {
			t.Error("the program ran before BeforeExec returned")
		}
		// The helper is set up and waiting: alive, not yet the program.
		if err := unix.Kill(helper, 0); err != nil {
			t.Errorf("the helper is not alive while BeforeExec runs: %v", err)
		}
		return nil
	}, &helper))
	if err != nil {
		t.Fatal(err)
	}
	res, err := h.Wait()
	if err != nil || res.ExitCode != 0 {
		t.Fatalf("gated program: %v %+v %q", err, res, res.Output)
	}
	if !called || !markerExists(t, dir) {
		t.Fatalf("BeforeExec called %v, program ran %v", called, markerExists(t, dir))
	}

	dir = t.TempDir()
	refused := errors.New("start record not durable")
	if _, err := r.Start(context.Background(), gatedSpec(dir, func() error { return refused }, &helper)); !errors.Is(err, refused) {
		t.Fatalf("Start with a refusing BeforeExec returned %v, want %v", err, refused)
	}
	if markerExists(t, dir) {
		t.Fatal("the program ran although BeforeExec refused")
	}
	if st, err := ReadStat(helper); err == nil && st.State != 'Z' && st.State != 'X' {
		t.Fatalf("the helper %d of a refused start is still running (state %c)", helper, st.State)
	}
	if n := r.Running(); n != 0 {
		t.Fatalf("%d concurrency slots held after a refused start", n)
	}
	// Whatever the gate waits for may take long (an fsync on a loaded node): the helper
	// waits set up, and then the program runs.
	dir = t.TempDir()
	h, err = r.Start(context.Background(), gatedSpec(dir, func() error { time.Sleep(200 * time.Millisecond); return nil }, &helper))
	if err != nil {
		t.Fatal(err)
	}
	if res, err := h.Wait(); err != nil || res.ExitCode != 0 || !markerExists(t, dir) {
		t.Fatalf("slow gate: %v %+v", err, res)
	}
}

// TestBeforeExecGatesTheProgram: a fresh sandbox.
func TestBeforeExecGatesTheProgram(t *testing.T) {
	requireSandbox(t)
	checkBeforeExecGate(t, NewRunner(Limits{}))
}

// TestBeforeExecGatesAPrestartedSandbox: a pre-started helper honours the gate the same way.
func TestBeforeExecGatesAPrestartedSandbox(t *testing.T) {
	r, _ := prestartedRunner(t, 1)
	checkBeforeExecGate(t, r)
}

// TestBeforeExecHelperEndsOnParentEOF: a helper waiting for the go-ahead whose parent goes
// away (the agent killed between set-up and its start record) never runs the program.
func TestBeforeExecHelperEndsOnParentEOF(t *testing.T) {
	requireSandbox(t)
	dir := t.TempDir()
	cfg, idmaps, err := prepareSandbox(SandboxSpec{Argv: []string{"/bin/sh", "-c", "echo ran > " + filepath.Join(dir, "marker")},
		WritableRoots: []string{dir}, TempDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	hp, err := startHelper(StartOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The gate shuts the parent's end of the configuration socket, as the agent's death
	// would (EOF), then refuses so configure cleans up.
	_, err = hp.configure(cfg, idmaps, nil, func() error {
		if err := unix.Shutdown(hp.cfgParent, unix.SHUT_WR); err != nil {
			return err
		}
		ws, werr := hp.proc.Wait()
		if werr != nil {
			return werr
		}
		if ws.ExitCode() != helperFailExit {
			t.Errorf("helper exit %d, want %d", ws.ExitCode(), helperFailExit)
		}
		return errors.New("parent gone")
	})
	if err == nil || !strings.Contains(err.Error(), "parent gone") {
		t.Fatalf("configure: %v", err)
	}
	if markerExists(t, dir) {
		t.Fatal("the program ran without the go-ahead")
	}
}
