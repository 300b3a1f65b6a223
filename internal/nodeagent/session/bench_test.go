package session

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/creack/pty"

	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/test/samples"
)

// echoMsg is answered by 12 bytes: the tty echo "ping\r\n" plus cat's copy.
var echoMsg = []byte("ping\n")

const echoReply = 12

// BenchmarkEchoRoundTrip measures a keystroke round trip through a Manager session
// (bounded input queue -> writer -> PTY -> output pump -> ring -> reader) against the
// floor of creack/pty + /bin/cat written and read directly, in the same run: each
// iteration takes one sample of each, interleaved, and the percentiles and ratio come
// from those samples.
func BenchmarkEchoRoundTrip(b *testing.B) {
	cmd := exec.Command("/bin/cat")
	cmd.Env = []string{}
	f, err := pty.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = f.Close()
	}()
	m := NewManager(Caps{})
	ctx := context.Background()
	s, err := m.Open(ctx, Spec{ID: "bench-echo", Argv: []string{"/bin/cat"}, IdleTimeout: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = s.Close(ctx) }()
	cursor := s.Events().LastSeq()
	buf := make([]byte, 256)
	var floor, path samples.Durations
	for b.Loop() {
		t0 := time.Now()
		if _, err := f.Write(echoMsg); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < echoReply; {
			n, err := f.Read(buf)
			if err != nil {
				b.Fatal(err)
			}
			got += n
		}
		floor = append(floor, time.Since(t0))

		t1 := time.Now()
		if err := s.Input(echoMsg); err != nil {
			b.Fatal(err)
		}
		for got := 0; got < echoReply; {
			if err := s.Events().Wait(ctx, cursor); err != nil {
				b.Fatal(err)
			}
			var evs []ring.Event
			evs, cursor, _ = s.Read(cursor, 0)
			for _, e := range evs {
				if e.Kind == ring.KindOutput {
					got += len(e.Data)
				}
			}
		}
		path = append(path, time.Since(t1))
	}
	b.ReportMetric(samples.Us(path.Quantile(0.50)), "session-p50-us")
	b.ReportMetric(samples.Us(path.Quantile(0.99)), "session-p99-us")
	b.ReportMetric(samples.Us(floor.Quantile(0.50)), "raw-pty-p50-us")
	b.ReportMetric(samples.Us(floor.Quantile(0.99)), "raw-pty-p99-us")
	samples.Ratio(b, "session-to-raw", path, floor)
}

func throughputFile(b *testing.B) (string, int64) {
	b.Helper()
	line := []byte("the quick brown fox jumps over the lazy dog 0123456789 ABCDEFGH\n") // 64 bytes
	data := bytes.Repeat(line, (1<<20)/len(line))
	p := filepath.Join(b.TempDir(), "payload.txt")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		b.Fatal(err)
	}
	return p, int64(len(data))
}

// BenchmarkThroughput cats a 1 MiB text file through a Manager session (default caps:
// 1,000 events / 4 MiB ring; the screen model is built only on demand; pre-started session
// sandboxes on, DefaultPrestartedSessions) until the session is cleaned up, against the
// floor of the same cat through a bare PTY read until EIO — interleaved, one sample of
// each per iteration. throughput-pct is the floor's p50 time over the session's p50 time
// (100 = as fast as a raw read), end to end: the session's time includes configuring its
// sandbox and confirming its cleanup. Each iteration first waits, untimed, until the
// pre-started pool is full again (it refills as a session ends), so that no refill runs
// during either sample. stream-pct compares the output alone: from the first output byte
// to the last, read by the raw loop against appended to the session's ring (ring event
// times).
func BenchmarkThroughput(b *testing.B) { throughput(b, Caps{}) }

// BenchmarkThroughputColdSandbox is BenchmarkThroughput with the pre-started pool off
// (Caps.PrestartedSessions < 0): every session's open starts its sandbox helper.
func BenchmarkThroughputColdSandbox(b *testing.B) { throughput(b, Caps{PrestartedSessions: -1}) }

func throughput(b *testing.B, caps Caps) {
	path, size := throughputFile(b)
	b.SetBytes(size)
	m := NewManager(caps)
	ctx := context.Background()
	defer func() { _ = m.Shutdown(ctx) }()
	buf := make([]byte, 32<<10)
	var floor, sess, floorStream, sessStream samples.Durations
	i := 0
	for b.Loop() {
		i++
		b.StopTimer()
		if err := m.WarmPrestarted(); err != nil { // a no-op with the pool off
			b.Fatal(err)
		}
		b.StartTimer()
		t0 := time.Now()
		cmd := exec.Command("/bin/cat", path)
		cmd.Env = []string{}
		f, err := pty.Start(cmd)
		if err != nil {
			b.Fatal(err)
		}
		var total int64
		var first, last time.Time
		for {
			n, err := f.Read(buf)
			total += int64(n)
			if n > 0 {
				if last = time.Now(); first.IsZero() {
					first = last
				}
			}
			if err != nil {
				if !errors.Is(err, syscall.EIO) {
					b.Fatal(err)
				}
				break
			}
		}
		_ = cmd.Wait()
		_ = f.Close()
		if total < size {
			b.Fatalf("read %d of %d bytes", total, size)
		}
		floor = append(floor, time.Since(t0))
		floorStream = append(floorStream, last.Sub(first))

		t1 := time.Now()
		// The sandbox shows the program only its roots: the payload's directory is one.
		s, err := m.Open(ctx, Spec{ID: fmt.Sprintf("bench-tp-%d", i), Argv: []string{"/bin/cat", path}, IdleTimeout: -1,
			ReadableRoots: []string{filepath.Dir(path)}})
		if err != nil {
			b.Fatal(err)
		}
		<-s.Done()
		sess = append(sess, time.Since(t1))
		st := s.Events().Stats()
		if st.OutputBytes < uint64(size) {
			b.Fatalf("ring saw %d of %d bytes", st.OutputBytes, size)
		}
		if st.Evicted > 0 {
			continue // reads so short that the first output events were evicted: no stream sample
		}
		evs, _, _ := s.Read(0, ring.MaxReadBatch)
		first, last = time.Time{}, time.Time{}
		for _, e := range evs {
			if e.Kind == ring.KindOutput {
				if last = e.Time; first.IsZero() {
					first = last
				}
			}
		}
		sessStream = append(sessStream, last.Sub(first))
	}
	sess.Report(b, "session")
	floor.Report(b, "raw-pty")
	if p := sess.Quantile(0.50); p > 0 {
		b.ReportMetric(100*float64(floor.Quantile(0.50))/float64(p), "throughput-pct")
	}
	if p := sessStream.Quantile(0.50); p > 0 {
		b.ReportMetric(samples.Ms(floorStream.Quantile(0.50)), "raw-stream-p50-ms")
		b.ReportMetric(samples.Ms(p), "session-stream-p50-ms")
		b.ReportMetric(100*float64(floorStream.Quantile(0.50))/float64(p), "stream-pct")
	}
}
