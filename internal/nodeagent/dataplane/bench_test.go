package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"testing"

	"github.com/creack/pty"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/ring"
)

// echoMsg is answered by 12 output bytes: the tty echo "ping\r\n" plus cat's
// copy.
var echoMsg = []byte("ping\n")

const echoReply = 12

// BenchmarkInProcessPTYEcho is the floor: write to a creack/pty running
// /bin/cat and read the echo from the master.
func BenchmarkInProcessPTYEcho(b *testing.B) {
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
	buf := make([]byte, 256)
	for b.Loop() {
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
	}
}

// BenchmarkDataPlaneInputEcho: POST input over HTTPS (cached token), then
// long-poll events until the echo arrived. "authz=cached" reuses allowed
// SubjectAccessReviews (the default); "authz=per-request" asks the API
// server on every request.
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
			for b.Loop() {
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
			}
		})
	}
}
