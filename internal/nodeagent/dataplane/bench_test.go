package dataplane

import (
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/creack/pty"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/samples"
)

// echoMsg is answered by 12 output bytes: the tty echo "ping\r\n" plus cat's
// copy.
var echoMsg = []byte("ping\n")

const echoReply = 12

// ptyFloor is the floor of the data-plane benchmark: write to a creack/pty running /bin/cat
// and read the echo from the master, in this process.
type ptyFloor struct {
	cmd *exec.Cmd
	f   *os.File
	buf []byte
}

func newPTYFloor(b *testing.B) *ptyFloor {
	cmd := exec.Command("/bin/cat")
	cmd.Env = []string{}
	f, err := pty.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	fl := &ptyFloor{cmd: cmd, f: f, buf: make([]byte, 256)}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = f.Close()
	})
	return fl
}

func (fl *ptyFloor) roundTrip(b *testing.B) {
	if _, err := fl.f.Write(echoMsg); err != nil {
		b.Fatal(err)
	}
	for got := 0; got < echoReply; {
		n, err := fl.f.Read(fl.buf)
		if err != nil {
			b.Fatal(err)
		}
		got += n
	}
}

// BenchmarkDataPlaneAttachEcho: a stdin frame on an open attach stream (over HTTPS, the
// stream authorized once when it opened), then stdout frames until the echo arrived,
// against the in-process PTY floor — one sample of each per iteration, interleaved,
// percentiles from the samples. (The attach stream through the aggregated API is
// test/bench/aggregated.)
func BenchmarkDataPlaneAttachEcho(b *testing.B) {
	requireAPIServer(b)
	floor := newPTYFloor(b)
	ts := startKubeServer(b, Limits{}, CacheOptions{})
	ts.openSession(b, testNS, "bench", wbv1.RawInputOperatorOnly, 0)
	ws := ts.attach(b, fx.tokens["operator"], testNS, "bench", true)
	var floorS, pathS samples.Durations
	for b.Loop() {
		t0 := time.Now()
		floor.roundTrip(b)
		floorS = append(floorS, time.Since(t0))
		t1 := time.Now()
		sendStdin(b, ws, echoMsg)
		readStdout(b, ws, func(out []byte) bool { return len(out) >= echoReply })
		pathS = append(pathS, time.Since(t1))
	}
	b.ReportMetric(samples.Us(floorS.Quantile(0.50)), "floor-p50-us")
	b.ReportMetric(samples.Us(pathS.Quantile(0.50)), "dataplane-p50-us")
	b.ReportMetric(samples.Us(pathS.Quantile(0.99)), "dataplane-p99-us")
	samples.Ratio(b, "dataplane-to-floor", pathS, floorS)
}
