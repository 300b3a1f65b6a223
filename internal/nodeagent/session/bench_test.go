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

	"github.com/creack/pty"

	"sensorium.dev/workbench/internal/nodeagent/ring"
)

// echoMsg is answered by 12 bytes: the tty echo "ping\r\n" plus cat's copy.
var echoMsg = []byte("ping\n")

const echoReply = 12

// BenchmarkPTYEchoRoundTrip is the floor: creack/pty + /bin/cat, direct
// write and read on the master.
func BenchmarkPTYEchoRoundTrip(b *testing.B) {
	cmd := exec.Command("/bin/cat")
	cmd.Env = []string{}
	f, err := pty.Start(cmd)
	if err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		f.Close()
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

// BenchmarkSessionEchoRoundTrip goes through the Manager: bounded input queue
// -> writer -> PTY -> output pump -> ring + screen model -> long-poll reader.
func BenchmarkSessionEchoRoundTrip(b *testing.B) {
	m := NewManager(Caps{})
	ctx := context.Background()
	s, err := m.Open(ctx, Spec{ID: "bench-echo", Argv: []string{"/bin/cat"}, IdleTimeout: -1})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close(ctx)
	cursor := s.Events().LastSeq()
	for b.Loop() {
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
	}
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

// BenchmarkRawPTYRead is the floor: cat a 1 MiB text file through a PTY and
// read the master until EIO.
func BenchmarkRawPTYRead(b *testing.B) {
	path, size := throughputFile(b)
	b.SetBytes(size)
	buf := make([]byte, 32<<10)
	for b.Loop() {
		cmd := exec.Command("/bin/cat", path)
		cmd.Env = []string{}
		f, err := pty.Start(cmd)
		if err != nil {
			b.Fatal(err)
		}
		var total int64
		for {
			n, err := f.Read(buf)
			total += int64(n)
			if err != nil {
				if !errors.Is(err, syscall.EIO) {
					b.Fatal(err)
				}
				break
			}
		}
		_ = cmd.Wait()
		f.Close()
		if total < size {
			b.Fatalf("read %d of %d bytes", total, size)
		}
	}
}

// BenchmarkSessionThroughput cats the same file through a Manager session
// (default caps: 1,000 events / 4 MiB ring, VT screen model) and waits for the
// session to be cleaned up.
func BenchmarkSessionThroughput(b *testing.B) {
	path, size := throughputFile(b)
	b.SetBytes(size)
	m := NewManager(Caps{})
	ctx := context.Background()
	i := 0
	for b.Loop() {
		i++
		s, err := m.Open(ctx, Spec{ID: fmt.Sprintf("bench-tp-%d", i), Argv: []string{"/bin/cat", path}, IdleTimeout: -1})
		if err != nil {
			b.Fatal(err)
		}
		<-s.Done()
		if st := s.Events().Stats(); st.OutputBytes < uint64(size) {
			b.Fatalf("ring saw %d of %d bytes", st.OutputBytes, size)
		}
	}
}
