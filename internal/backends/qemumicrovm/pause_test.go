package qemumicrovm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
)

// pauseCycles is the number of pause/resume cycles TestPauseResumeCycles runs
// (WB_PAUSE_CYCLES overrides).
func pauseCycles() int { return envCount("WB_PAUSE_CYCLES", 12) }

// TestPauseResumeCycles: a real TCG guest is paused and resumed many times while two
// streams of commands run into each pause through the backend's channels and a session
// relay long-polls a guest terminal on channels of its own. While paused, new channels of
// the backend are refused with environment-paused, and the QEMU process is stopped; after
// every resume fresh host-initiated channels are answered and run a command within a
// bounded wait. With QMP stop as the pause, about one cycle in ten left the vsock device's
// ring worker gone and the guest unreachable for good (pause.go).
func TestPauseResumeCycles(t *testing.T) {
	b, img := vmBackend(t)
	spec := testSpec("env-pause", img)
	if _, err := b.Allocate(ctxT(t, 120*time.Second), spec); err != nil {
		t.Fatalf("allocate: %v", err)
	}
	defer func() {
		start := time.Now()
		teardown(t, b, spec)
		t.Logf("teardown of the paused VM: %v", time.Since(start).Round(time.Millisecond))
	}()

	spawn := func(ctx context.Context, op string) error {
		c, err := b.Guest(ctx, spec.ID)
		if err != nil {
			return err
		}
		defer func() { _ = c.Close() }()
		res, err := c.Spawn(ctx, op, protocol.SpawnArgs{Argv: []string{"/bin/cat", "/proc/uptime"}, Cwd: "repo", TimeoutMS: 2000, OutputMax: 4096})
		if err != nil {
			return err
		}
		if res.ExitCode != 0 {
			return fmt.Errorf("exit %d: %s", res.ExitCode, res.Stderr)
		}
		return nil
	}

	// The session relay: another process in the product, so its channels are not the
	// backend's to drain; an idle terminal answers a long poll every 2 s.
	v := b.get(spec.ID)
	ctl, err := guestclient.Connect(ctxT(t, 10*time.Second), v.endpoint(), v.rec.Binding)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ctl.Close() }()
	rd, err := guestclient.Connect(ctxT(t, 10*time.Second), v.endpoint(), v.rec.Binding)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = rd.Close() }()
	if _, err := ctl.PTYOpen(ctxT(t, 10*time.Second), "", protocol.PTYOpenArgs{SessionID: "relay", Argv: []string{"/bin/sh"}, Cwd: "repo", Rows: 24, Cols: 80}); err != nil {
		t.Fatal(err)
	}
	relayStop, relayDone := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(relayDone)
		var off uint64
		for {
			select {
			case <-relayStop:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			d, _, err := rd.PTYRead(ctx, "", protocol.PTYReadArgs{SessionID: "relay", Offset: off, Max: 4096, WaitMS: 2000})
			cancel()
			if err != nil {
				return
			}
			off = d.Next
		}
	}()

	var refused atomic.Int64
	var pauseTook []time.Duration
	for cycle := 1; cycle <= pauseCycles(); cycle++ {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for s := range 2 {
			wg.Go(func() {
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					default:
					}
					ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
					err := spawn(ctx, fmt.Sprintf("bg-%d-%d-%d", cycle, s, i))
					cancel()
					if actuation.CodeOf(err) == actuation.CodeEnvironmentPaused {
						refused.Add(1)
						select { // held off: try again shortly
						case <-stop:
							return
						case <-time.After(10 * time.Millisecond):
						}
					}
				}
			})
		}
		time.Sleep(time.Duration(20+cycle*17%150) * time.Millisecond)
		pauseStart := time.Now()
		st, err := b.Pause(ctxT(t, 30*time.Second), spec)
		if err != nil || st.Phase != backends.PhasePaused {
			t.Fatalf("cycle %d: pause: %+v %v", cycle, st, err)
		}
		pauseTook = append(pauseTook, time.Since(pauseStart))
		if c, err := b.Guest(ctxT(t, 5*time.Second), spec.ID); actuation.CodeOf(err) != actuation.CodeEnvironmentPaused {
			if c != nil {
				_ = c.Close()
			}
			t.Fatalf("cycle %d: a new channel to a paused VM: %v, want %s", cycle, err, string(actuation.CodeEnvironmentPaused))
		}
		if state, err := b.RunState(ctxT(t, 5*time.Second), spec.ID); err != nil || state != "paused" {
			t.Fatalf("cycle %d: run state of a paused VM: %q %v", cycle, state, err)
		}
		time.Sleep(time.Duration(50+cycle*31%200) * time.Millisecond)
		close(stop)
		if st, err := b.Resume(ctxT(t, 60*time.Second), spec); err != nil || st.Phase != backends.PhaseReady {
			dumpVM(t, b, spec.ID)
			t.Fatalf("cycle %d: resume: %+v %v", cycle, st, err)
		}
		wg.Wait()
		for k := range 4 {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			err := spawn(ctx, fmt.Sprintf("after-%d-%d", cycle, k))
			cancel()
			if err != nil {
				dumpVM(t, b, spec.ID)
				t.Fatalf("cycle %d: command %d after resume (%v): %v", cycle, k, time.Since(start).Round(time.Millisecond), err)
			}
		}
	}
	// A paused VM drains and tears down without asking its guest, which does not run
	// (the deferred teardown checks that nothing is left). The relay stops first: its
	// long poll would wait out its deadline on a paused guest.
	close(relayStop)
	select {
	case <-relayDone:
	case <-time.After(30 * time.Second):
		t.Fatal("the relay's long poll did not return")
	}
	if st, err := b.Pause(ctxT(t, 30*time.Second), spec); err != nil || st.Phase != backends.PhasePaused {
		t.Fatalf("final pause: %+v %v", st, err)
	}
	if st, err := b.Drain(ctxT(t, 30*time.Second), spec); err != nil || st.Phase != backends.PhaseDraining || !strings.Contains(st.Message, "paused") {
		t.Fatalf("drain of a paused VM: %+v %v", st, err)
	}
	t.Logf("%d cycles; %d stream channels refused with %s while paused; pause p50 %v, max %v",
		pauseCycles(), refused.Load(), string(actuation.CodeEnvironmentPaused), p50(pauseTook).Round(time.Millisecond), slices.Max(pauseTook).Round(time.Millisecond))
}

// dumpVM logs what a wedged VM's processes are doing: the vsock device's and QEMU's
// threads (state, wait channel, kernel stack) and the tail of the guest's serial console.
func dumpVM(t *testing.T, b *Backend, id string) {
	t.Helper()
	v := b.get(id)
	if v == nil {
		return
	}
	for _, p := range []struct {
		name string
		pid  int
	}{{"vhost-device-vsock", v.dev.id.Pid}, {"qemu", v.qemu.id.Pid}} {
		tasks, _ := os.ReadDir(fmt.Sprintf("/proc/%d/task", p.pid))
		for _, task := range tasks {
			dir := fmt.Sprintf("/proc/%d/task/%s", p.pid, task.Name())
			comm, _ := os.ReadFile(dir + "/comm")
			wchan, _ := os.ReadFile(dir + "/wchan")
			stat, _ := os.ReadFile(dir + "/stat")
			sched, _ := os.ReadFile(dir + "/schedstat")
			stack, _ := os.ReadFile(dir + "/stack")
			t.Logf("%s task %s %q wchan %q schedstat %q stat %q\n%s", p.name, task.Name(), strings.TrimSpace(string(comm)), wchan,
				strings.TrimSpace(string(sched)), strings.Fields(string(stat))[2], stack)
		}
	}
	if out, err := os.ReadFile(filepath.Join(b.dir(id), serialLog)); err == nil {
		t.Logf("guest serial:\n%s", out[max(0, len(out)-3000):])
	}
	if gdb, err := exec.LookPath("gdb"); err == nil { // the device's user-space stacks, where a debugger is installed
		out, _ := exec.Command(gdb, "-p", strconv.Itoa(v.dev.id.Pid), "-batch", "-ex", "thread apply all bt").CombinedOutput()
		t.Logf("vhost-device-vsock stacks:\n%s", out)
	}
}
