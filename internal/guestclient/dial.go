// Package guestclient is the host side of the Workbench guest protocol (guest/protocol/v1):
// it reaches a guest agent through the hybrid-vsock Unix socket of a VMM's vsock device
// (vhost-device-vsock, Cloud Hypervisor and Firecracker share the convention: connect,
// "CONNECT <port>\n", "OK <n>\n", then the stream is the guest port), performs the exact
// handshake, and runs bounded requests with strictly increasing sequences and deadlines.
// Everything the guest returns is treated as untrusted: frame and transfer sizes, chunk
// counts and digests are re-validated, echoed fields must match, and per-operation
// results are checked against what was asked (output budgets, offsets, content-bound
// stage refs the host computes itself).
//
// A Client carries one request at a time; use one Client (one connection) per
// concurrent stream, e.g. one for a PTY session's reads and one for its input.
package guestclient

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
)

// Endpoint is how to reach a guest agent.
type Endpoint struct {
	// Path is the host Unix socket: the vsock device's hybrid socket (Hybrid true) or the
	// conformance transport's socket (Hybrid false).
	Path string
	// Hybrid selects the CONNECT/OK preamble of hybrid vsock.
	Hybrid bool
	// Port is the guest vsock port (Hybrid only); 0 means DefaultPort.
	Port uint32
	// Dev and Ino, when Ino is non-zero, pin the socket's identity: the path must be a
	// socket with this device and inode number before and after the connect (a replaced
	// endpoint is refused before any byte is sent).
	Dev, Ino uint64
}

// DefaultPort is the guest agent's vsock port.
const DefaultPort = protocol.AgentPort

// Bounds of the connect preamble.
const (
	// maxPreambleLine bounds the "OK <n>\n" line ("OK 4294967295\n" is 14 bytes).
	maxPreambleLine = 32
	// DefaultConnectTimeout bounds connect + preamble when ctx has no deadline.
	DefaultConnectTimeout = 10 * time.Second
)

// ErrEndpointReplaced is returned when the socket's identity differs from the pinned one.
var ErrEndpointReplaced = errors.New("guestclient: endpoint socket replaced")

func checkIdentity(ep Endpoint) error {
	if ep.Ino == 0 {
		return nil
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(ep.Path, &st); err != nil {
		return fmt.Errorf("guestclient: endpoint %s: %w", ep.Path, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFSOCK || statDev(&st) != ep.Dev || st.Ino != ep.Ino {
		return fmt.Errorf("%w: %s is not the socket %d:%d", ErrEndpointReplaced, ep.Path, ep.Dev, ep.Ino)
	}
	return nil
}

// Dial connects to the endpoint and, for hybrid vsock, completes the CONNECT preamble.
// The returned connection carries no deadline.
func Dial(ctx context.Context, ep Endpoint) (net.Conn, error) {
	if err := checkIdentity(ep); err != nil {
		return nil, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(DefaultConnectTimeout)
	}
	d := net.Dialer{Deadline: deadline}
	c, err := d.DialContext(ctx, "unix", ep.Path)
	if err != nil {
		return nil, fmt.Errorf("guestclient: connect %s: %w", ep.Path, err)
	}
	if err := checkIdentity(ep); err != nil {
		_ = c.Close()
		return nil, err
	}
	if !ep.Hybrid {
		return c, nil
	}
	port := ep.Port
	if port == 0 {
		port = DefaultPort
	}
	_ = c.SetDeadline(deadline)
	if _, err := hybridConnect(c, port); err != nil {
		_ = c.Close()
		return nil, err
	}
	_ = c.SetDeadline(time.Time{})
	return c, nil
}

// ErrPreamble is wrapped by every refusal of the hybrid-vsock preamble.
var ErrPreamble = errors.New("guestclient: hybrid vsock preamble refused")

// hybridConnect writes "CONNECT <port>\n" and reads exactly one line "OK <n>\n" (n a
// decimal uint32: the device's connection port), one byte at a time so that no byte of
// the guest stream is consumed.
func hybridConnect(rw io.ReadWriter, port uint32) (uint32, error) {
	if _, err := io.WriteString(rw, "CONNECT "+strconv.FormatUint(uint64(port), 10)+"\n"); err != nil {
		return 0, fmt.Errorf("guestclient: write CONNECT: %w", err)
	}
	var line []byte
	var b [1]byte
	for {
		if _, err := io.ReadFull(rw, b[:]); err != nil {
			if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
				return 0, fmt.Errorf("%w: connection closed before OK (is the guest listening on port %d?): %w", ErrPreamble, port, err)
			}
			return 0, fmt.Errorf("guestclient: read preamble: %w", err)
		}
		if b[0] == '\n' {
			break
		}
		line = append(line, b[0])
		if len(line) >= maxPreambleLine {
			return 0, fmt.Errorf("%w: line longer than %d bytes", ErrPreamble, maxPreambleLine)
		}
	}
	s := string(line)
	num, found := strings.CutPrefix(s, "OK ")
	if !found {
		return 0, fmt.Errorf("%w: %q", ErrPreamble, s)
	}
	n, err := strconv.ParseUint(num, 10, 32)
	if err != nil || strconv.FormatUint(n, 10) != num {
		return 0, fmt.Errorf("%w: %q", ErrPreamble, s)
	}
	return uint32(n), nil
}
