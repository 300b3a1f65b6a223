package qemumicrovm

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// pauseCycles is the number of pause/resume cycles TestPauseResumeCycles runs
// (WB_PAUSE_CYCLES overrides).
func pauseCycles() int {
	if n, err := strconv.Atoi(os.Getenv("WB_PAUSE_CYCLES")); err == nil && n > 0 {
		return n
	}
	return 12
}

// TestPauseResumeCycles: a real TCG guest is paused and resumed many times while two
// streams of commands run into each pause through the backend's channels and a session
// relay long-polls a guest terminal on channels of its own. Each pause drains the
// backend's channels first (new ones are refused with environment-paused while it
// drains and holds); after every resume fresh host-initiated channels are answered and
// run a command within a bounded wait. Without the drain, about one cycle in ten left the
// vsock device answering no new connection after cont (see pause.go).
func TestPauseResumeCycles(t *testing.T) {
	b, img := vmBackend(t)
	spec := testSpec("env-pause", img)
	if _, err := b.Allocate(ctxT(t, 120*time.Second), spec); err != nil {
		t.Fatalf("allocate: %v", err)
	}
	defer teardown(t, b, spec)

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
	go func() {
		var off uint64
		for {
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
					if fsaccess.CodeOf(err) == CodePaused {
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
		st, err := b.Pause(ctxT(t, 30*time.Second), spec)
		if err != nil || st.Phase != backends.PhasePaused || strings.Contains(st.Message, "still open") {
			t.Fatalf("cycle %d: pause: %+v %v", cycle, st, err)
		}
		time.Sleep(time.Duration(50+cycle*31%200) * time.Millisecond)
		close(stop)
		if st, err := b.Resume(ctxT(t, 60*time.Second), spec); err != nil || st.Phase != backends.PhaseReady {
			t.Fatalf("cycle %d: resume: %+v %v", cycle, st, err)
		}
		wg.Wait()
		for k := range 4 {
			start := time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			err := spawn(ctx, fmt.Sprintf("after-%d-%d", cycle, k))
			cancel()
			if err != nil {
				if b, err := os.ReadFile(filepath.Join(b.dir(spec.ID), serialLog)); err == nil {
					t.Logf("guest serial:\n%s", b[max(0, len(b)-3000):])
				}
				t.Fatalf("cycle %d: command %d after resume (%v): %v", cycle, k, time.Since(start).Round(time.Millisecond), err)
			}
		}
	}
	if refused.Load() == 0 {
		t.Fatal("no channel was refused while a pause drained or held the VM")
	}
	t.Logf("%d cycles; %d channels refused with %s while pausing or paused", pauseCycles(), refused.Load(), CodePaused)
}
