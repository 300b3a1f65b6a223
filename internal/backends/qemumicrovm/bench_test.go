package qemumicrovm

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/creack/pty"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/guestenv"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/test/samples"
)

// envCount is the positive integer in environment variable name, else def.
func envCount(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}

// benchBoots is how many boots each boot benchmark iteration measures
// (WORKBENCH_BENCH_BOOTS overrides; at least 10 for a meaningful p50).
func benchBoots() int { return envCount("WORKBENCH_BENCH_BOOTS", 10) }

func p50(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func msOf(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// bareBoot is the floor (FloorBoot): the product's own command line launched directly.
func bareBoot(b *testing.B, bk *Backend, img *backends.BootImage, dir string) time.Duration {
	b.Helper()
	took, err := bk.FloorBoot(context.Background(), img, dir)
	if err != nil {
		b.Fatal(err)
	}
	return took
}

// BenchmarkBootToAgentReady: Allocate (environment create at the broker) → guest agent
// ready (handshake done, roots created, record complete), p50 over benchBoots() boots,
// against the floor of a bare QEMU launch to the agent's first reply with the same kernel,
// image and accelerator, interleaved in the same run. Also reports QEMU and vsock device
// RSS per VM. Accelerator: TCG (these machines cannot run a stock kernel under KVM).
func BenchmarkBootToAgentReady(b *testing.B) {
	imageDir, img := vmEnv(b)
	cfg := testConfig(b, imageDir)
	bk, err := New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	var full, floor []time.Duration
	var qemuRSS, devRSS []int64
	for i := 0; i < b.N; i++ {
		for j := 0; j < benchBoots(); j++ {
			floor = append(floor, bareBoot(b, bk, img, filepath.Join(cfg.StateDir, "floor")))
			spec := testSpec(fmt.Sprintf("bench-%d-%d", i, j), img)
			t0 := time.Now()
			if _, err := bk.Allocate(context.Background(), spec); err != nil {
				b.Fatal(err)
			}
			full = append(full, time.Since(t0))
			info, _ := bk.Info(spec.ID)
			if kb, err := procRSS(info.QEMU.Pid); err == nil {
				qemuRSS = append(qemuRSS, kb)
			}
			if kb, err := procRSS(info.Device.Pid); err == nil {
				devRSS = append(devRSS, kb)
			}
			if _, err := bk.Teardown(context.Background(), spec); err != nil {
				b.Fatal(err)
			}
		}
	}
	b.ReportMetric(msOf(p50(full)), "p50-ready-ms")
	b.ReportMetric(msOf(p50(floor)), "p50-floor-ms")
	b.ReportMetric(float64(p50(full))/float64(p50(floor)), "ratio-to-floor")
	b.ReportMetric(float64(len(full)), "boots")
	if len(qemuRSS) > 0 {
		slices.Sort(qemuRSS)
		slices.Sort(devRSS)
		b.ReportMetric(float64(qemuRSS[len(qemuRSS)/2])/1024, "qemu-rss-MiB")
		b.ReportMetric(float64(devRSS[len(devRSS)/2])/1024, "vsockdev-rss-MiB")
	}
	b.Logf("accel=tcg boots=%d ready p50 %v (min %v max %v), floor p50 %v (min %v max %v)", len(full),
		p50(full).Round(time.Millisecond), slices.Min(full).Round(time.Millisecond), slices.Max(full).Round(time.Millisecond),
		p50(floor).Round(time.Millisecond), slices.Min(floor).Round(time.Millisecond), slices.Max(floor).Round(time.Millisecond))
}

// BenchmarkPTYRoundTrip: a one-line echo through /bin/cat on a PTY inside the VM (guest
// pty.input, then pty.read until the tty echo and cat's copy are back), and through the node
// agent's path for an interactive session of a VM environment (a host PTY session running
// the guest PTY relay), against the floor of the same round trip on a bare host PTY — one
// sample of each per iteration, interleaved, percentiles from the samples.
func BenchmarkPTYRoundTrip(b *testing.B) {
	msg, reply := []byte("ping\n"), 12 // "ping\r\n" echoed by the tty plus cat's copy
	ctx := context.Background()

	// Floor: a bare host PTY.
	cmd := exec.Command("/bin/cat")
	cmd.Env = []string{}
	f, err := pty.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait(); _ = f.Close() }()
	buf := make([]byte, 256)
	hostRoundTrip := func() {
		if _, err := f.Write(msg); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < reply; {
			n, err := f.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
	}

	// In the VM: the guest protocol directly.
	imageDir, img := vmEnv(b)
	bk, err := New(testConfig(b, imageDir))
	if err != nil {
		b.Fatal(err)
	}
	spec := testSpec("bench-pty", img)
	if _, err := bk.Allocate(ctx, spec); err != nil {
		b.Fatal(err)
	}
	defer func() {
		if _, err := bk.Teardown(context.Background(), spec); err != nil {
			b.Error(err)
		}
	}()
	ctl, err := bk.Guest(ctx, spec.ID)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = ctl.Close() }()
	rd, err := bk.Guest(ctx, spec.ID)
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = rd.Close() }()
	if _, err := ctl.PTYOpen(ctx, "", protocol.PTYOpenArgs{SessionID: "cat", Argv: []string{"/bin/cat"}, Rows: 24, Cols: 80}); err != nil {
		b.Fatal(err)
	}
	off := uint64(0)
	vmRoundTrip := func() {
		if _, err := ctl.PTYInput(ctx, "", "cat", msg); err != nil {
			b.Fatal(err)
		}
		for want := off + uint64(reply); off < want; {
			d, _, err := rd.PTYRead(ctx, "", protocol.PTYReadArgs{SessionID: "cat", Offset: off, Max: 4096, WaitMS: 5000})
			if err != nil {
				b.Fatal(err)
			}
			off = d.Next
		}
	}

	// The node agent's path: a host PTY session (ring) running the guest PTY relay (a host
	// relay: it must reach the VM's socket; the program runs in the guest).
	ep, bind, err := bk.GuestChannel(spec.ID)
	if err != nil {
		b.Fatal(err)
	}
	e, err := guestenv.RelayConfig{Endpoint: ep, Binding: bind, SessionID: "relay", Argv: []string{"/bin/cat"}}.Environ()
	if err != nil {
		b.Fatal(err)
	}
	self, _ := os.Executable()
	m := session.NewManager(session.Caps{})
	s, err := m.Open(ctx, session.Spec{ID: "relay", Argv: []string{self, guestenv.RelayArg}, Env: []string{e}, Dir: "/", IdleTimeout: -1,
		Rows: 24, Cols: 80, HostRelay: true})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()
	cursor := s.Events().LastSeq()
	relayRoundTrip := func() {
		if err := s.Input(msg); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < reply; {
			wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
			err := s.Events().Wait(wctx, cursor)
			cancel()
			if err != nil {
				b.Fatal(err)
			}
			var evs []ring.Event
			evs, cursor, _ = s.Read(cursor, 0)
			for _, ev := range evs {
				if ev.Kind == ring.KindOutput {
					got += len(ev.Data)
				}
			}
		}
	}

	// The guest's tty needs a moment after open before input is echoed reliably: one
	// warm-up round trip of each.
	hostRoundTrip()
	vmRoundTrip()
	relayRoundTrip()
	timed := func(fn func()) time.Duration { t0 := time.Now(); fn(); return time.Since(t0) }
	var host, vm, relay samples.Durations
	for b.Loop() {
		host = append(host, timed(hostRoundTrip))
		vm = append(vm, timed(vmRoundTrip))
		relay = append(relay, timed(relayRoundTrip))
	}
	b.ReportMetric(samples.Us(host.Quantile(0.50)), "host-pty-p50-us")
	b.ReportMetric(samples.Us(vm.Quantile(0.50)), "in-vm-p50-us")
	b.ReportMetric(samples.Us(vm.Quantile(0.99)), "in-vm-p99-us")
	b.ReportMetric(samples.Us(relay.Quantile(0.50)), "relay-session-p50-us")
	b.ReportMetric(samples.Us(relay.Quantile(0.99)), "relay-session-p99-us")
	samples.Ratio(b, "in-vm-to-host", vm, host)
	samples.Ratio(b, "relay-to-host", relay, host)
}
