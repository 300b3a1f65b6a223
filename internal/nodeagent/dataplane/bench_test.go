package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/creack/pty"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/ring"
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

// BenchmarkDataPlaneInputEcho: POST input over HTTPS (cached token), then long-poll events
// until the echo arrived, against the in-process PTY floor — one sample of each per
// iteration, interleaved, percentiles from the samples. "authz=cached" reuses allowed
// SubjectAccessReviews (the default); "authz=per-request" asks the API server on every
// request. (The attach stream through the aggregated API is test/bench/aggregated.)
func BenchmarkDataPlaneInputEcho(b *testing.B) {
	fx := requireAPIServer(b)
	for _, bc := range []struct {
		name, session string
		cache         CacheOptions
	}{
		{"authz=cached", "bench-cached", CacheOptions{}},
		{"authz=per-request", "bench-per-request", CacheOptions{TTL: -1}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			floor := newPTYFloor(b)
			ts := startKubeServer(b, Limits{}, bc.cache)
			name := bc.session
			s := ts.openSession(b, testNS, name, wbv1.RawInputOperatorOnly, 0)
			op := fx.tokens["operator"]
			inputPath := SessionPath(testNS, name, "input")
			eventsPath := SessionPath(testNS, name, "events")
			ctx := context.Background()
			cursor := s.Events().LastSeq()
			// Warm the token cache and the connection.
			if status, body, err := ts.request(ctx, "GET", SessionPath(testNS, name, "screen"), op, nil); err != nil || status != 200 {
				b.Fatalf("warm-up: %d %v %s", status, err, body)
			}
			in := InputRequest{Data: echoMsg}
			var floorS, pathS samples.Durations
			for b.Loop() {
				t0 := time.Now()
				floor.roundTrip(b)
				floorS = append(floorS, time.Since(t0))
				t1 := time.Now()
				if status, body, err := ts.request(ctx, "POST", inputPath, op, in); err != nil || status != 202 {
					b.Fatalf("input: %d %v %s", status, err, body)
				}
				for got := 0; got < echoReply; {
					status, body, err := ts.request(ctx, "GET", fmt.Sprintf("%s?cursor=%d&waitSeconds=10", eventsPath, cursor), op, nil)
					if err != nil || status != 200 {
						b.Fatalf("events: %d %v %s", status, err, body)
					}
					var er EventsResponse
					if err := json.Unmarshal(body, &er); err != nil {
						b.Fatal(err)
					}
					if er.Gap != nil || er.Closed {
						b.Fatalf("unexpected gap or close: %+v", er)
					}
					for _, e := range er.Events {
						if e.Kind == ring.KindOutput {
							got += len(e.Data)
						}
					}
					cursor = er.Next
				}
				pathS = append(pathS, time.Since(t1))
			}
			b.ReportMetric(samples.Us(floorS.Quantile(0.50)), "floor-p50-us")
			b.ReportMetric(samples.Us(pathS.Quantile(0.50)), "dataplane-p50-us")
			b.ReportMetric(samples.Us(pathS.Quantile(0.99)), "dataplane-p99-us")
			samples.Ratio(b, "dataplane-to-floor", pathS, floorS)
		})
	}
}
