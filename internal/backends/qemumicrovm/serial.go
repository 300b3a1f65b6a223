package qemumicrovm

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"time"
)

// serialSink is the VM's diagnostic serial: output only and bounded. QEMU's serial
// chardev connects once to a broker-owned listener; the broker copies at most max bytes
// into serial.log (0600, in the VM directory) and discards the rest, counting it. Nothing
// is ever written towards the guest, and the bytes never enter the agent's logs or any
// status message (they are untrusted guest output). When the broker process goes away,
// QEMU drops serial output (a chardev without a peer discards); an adopted VM has no
// serial capture.
type serialSink struct {
	ln   *net.UnixListener
	path string
	max  int64

	mu      sync.Mutex
	conn    net.Conn
	written int64
	dropped int64
	done    chan struct{}
}

// listenSerial creates the listener QEMU's serial chardev connects to.
func listenSerial(sockPath, logPath string, max int64) (*serialSink, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: sockPath, Net: "unix"})
	if err != nil {
		return nil, err
	}
	ln.SetUnlinkOnClose(true)
	s := &serialSink{ln: ln, path: logPath, max: max, done: make(chan struct{})}
	return s, nil
}

// serve accepts QEMU's one connection (until deadline), removes the listener, and copies.
func (s *serialSink) serve(deadline time.Time) {
	defer close(s.done)
	_ = s.ln.SetDeadline(deadline)
	c, err := s.ln.Accept()
	_ = s.ln.Close() // unlinks the socket: exactly one peer, ever
	if err != nil {
		return
	}
	s.mu.Lock()
	s.conn = c
	s.mu.Unlock()
	f, err := os.OpenFile(s.path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		f = nil
	}
	buf := make([]byte, 32<<10)
	for {
		n, rerr := c.Read(buf)
		if n > 0 {
			keep := int64(n)
			s.mu.Lock()
			if room := s.max - s.written; keep > room {
				keep = max(room, 0)
			}
			s.written += keep
			s.dropped += int64(n) - keep
			s.mu.Unlock()
			if keep > 0 && f != nil {
				_, _ = f.Write(buf[:keep])
			}
		}
		if rerr != nil {
			break
		}
	}
	_ = c.Close()
	if f != nil {
		_ = f.Close()
	}
}

// close stops the capture (the listener if QEMU never connected, or the connection).
func (s *serialSink) close() {
	if s == nil {
		return
	}
	_ = s.ln.Close()
	s.mu.Lock()
	if s.conn != nil {
		_ = s.conn.Close()
	}
	s.mu.Unlock()
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
	}
}

// stats returns the bytes kept and dropped so far.
func (s *serialSink) stats() (written, dropped int64) {
	if s == nil {
		return 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written, s.dropped
}

// cappedBuffer keeps the first max bytes written to it (a VMM's or device's stdout and
// stderr: host messages, used in boot errors) and discards the rest.
type cappedBuffer struct {
	mu   sync.Mutex
	max  int
	buf  []byte
	lost int64
}

func (c *cappedBuffer) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	room := c.max - len(c.buf)
	if room > 0 {
		c.buf = append(c.buf, p[:min(room, len(p))]...)
	}
	if len(p) > room {
		c.lost += int64(len(p) - max(room, 0))
	}
	return len(p), nil
}

// String returns the kept bytes, sanitized: printable ASCII, newlines as " | ", at most
// 512 bytes from the end.
func (c *cappedBuffer) String() string {
	c.mu.Lock()
	b := append([]byte(nil), c.buf...)
	c.mu.Unlock()
	return sanitize(b, 512)
}

func sanitize(b []byte, limit int) string {
	out := make([]byte, 0, len(b))
	for _, ch := range b {
		switch {
		case ch == '\n':
			if len(out) > 0 && out[len(out)-1] != ' ' {
				out = append(out, " | "...)
			}
		case ch >= ' ' && ch <= '~':
			out = append(out, ch)
		case ch == '\r' || ch == '\t':
			out = append(out, ' ')
		default:
			out = append(out, '?')
		}
	}
	for len(out) > 0 && (out[len(out)-1] == ' ' || out[len(out)-1] == '|') {
		out = out[:len(out)-1]
	}
	if len(out) > limit {
		out = append([]byte("…"), out[len(out)-limit:]...)
	}
	return string(out)
}

var _ io.Writer = (*cappedBuffer)(nil)

// isClosed reports whether ch is closed (nil: never).
func isClosed(ch <-chan struct{}) bool {
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

var errExited = errors.New("process exited")
