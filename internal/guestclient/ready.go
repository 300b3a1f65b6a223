package guestclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
)

// ErrReadySignal is wrapped when the guest's ready connection carried something else.
var ErrReadySignal = errors.New("guestclient: malformed guest ready signal")

// ReadyListener receives the guest agent's one-shot readiness hint: with hybrid vsock the
// device forwards the guest's connection to host port p to the Unix socket "<uds>_<p>".
// Create it before the VM starts; wait on it before the first CONNECT (a host connection
// that reaches vhost-device-vsock before the guest driver initialized the vrings can
// wedge the device). The hint is untrusted and proves nothing: the handshake decides.
type ReadyListener struct {
	l    *net.UnixListener
	path string
}

// ReadyPath is the host socket for guest-initiated connections to port on udsPath.
func ReadyPath(udsPath string, port uint32) string {
	return udsPath + "_" + strconv.FormatUint(uint64(port), 10)
}

// ListenReady listens on ReadyPath(udsPath, port); port 0 means protocol.ReadyPort. An
// existing file at that path is refused (never removed here).
func ListenReady(udsPath string, port uint32) (*ReadyListener, error) {
	if port == 0 {
		port = protocol.ReadyPort
	}
	p := ReadyPath(udsPath, port)
	if _, err := os.Lstat(p); err == nil {
		return nil, fmt.Errorf("guestclient: ready socket %s already exists", p)
	}
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("guestclient: ready socket: %w", err)
	}
	l.SetUnlinkOnClose(true)
	return &ReadyListener{l: l, path: p}, nil
}

// Path is the listener's socket path.
func (r *ReadyListener) Path() string { return r.path }

// Wait accepts the guest's ready connection and checks its one bounded line, until ctx
// ends.
func (r *ReadyListener) Wait(ctx context.Context) error {
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultConnectTimeout)
	}
	_ = r.l.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = r.l.SetDeadline(time.Now()) })
	defer stop()
	c, err := r.l.Accept()
	if err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("guestclient: no ready signal: %w", ctx.Err())
		}
		return fmt.Errorf("guestclient: no ready signal: %w", err)
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(deadline)
	buf := make([]byte, len(protocol.ReadyLine)+1)
	n, err := io.ReadFull(c, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return fmt.Errorf("guestclient: ready signal: %w", err)
	}
	if string(buf[:n]) != protocol.ReadyLine {
		return fmt.Errorf("%w: %q", ErrReadySignal, buf[:n])
	}
	return nil
}

// Close stops listening and removes the socket.
func (r *ReadyListener) Close() error { return r.l.Close() }
