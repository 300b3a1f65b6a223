package vfkitsystem

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
)

// Bounds of the host side of the control channel.
const (
	// maxConnectLine bounds the "CONNECT <port>\n" request line.
	maxConnectLine = 32
	// connectTimeout bounds reading the request line and the guest's accept.
	connectTimeout = 10 * time.Second
	// MaxChannels bounds the concurrent channels one VM's socket serves.
	MaxChannels = 64
)

// VsockDialer opens a connection to a guest vsock port (vz: VirtioSocketDevice.Connect).
type VsockDialer func(port uint32) (net.Conn, error)

// ServeHybrid serves the hybrid-vsock protocol of the qemu-microvm.v1 backend's vsock
// device on ln, so the node agent's guest client works unchanged against either backend:
// a client writes "CONNECT <port>\n", the broker opens the guest port through dial and
// answers "OK <port>\n", then bytes flow both ways until either side closes. Only
// protocol.AgentPort is served (the guest agent's one port); anything else, a malformed
// or oversized line, or more than MaxChannels concurrent channels closes the client's
// connection. ServeHybrid returns when ln is closed; live channels are closed with it.
func ServeHybrid(ln net.Listener, dial VsockDialer) error {
	var mu sync.Mutex
	live := map[net.Conn]struct{}{}
	defer func() {
		mu.Lock()
		for c := range live {
			_ = c.Close()
		}
		mu.Unlock()
	}()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("hybrid vsock accept: %w", err)
		}
		mu.Lock()
		if len(live) >= MaxChannels {
			mu.Unlock()
			_ = c.Close()
			continue
		}
		live[c] = struct{}{}
		mu.Unlock()
		go func() {
			serveOne(c, dial, func(g net.Conn) {
				mu.Lock()
				live[g] = struct{}{}
				mu.Unlock()
			})
			mu.Lock()
			delete(live, c)
			mu.Unlock()
		}()
	}
}

func serveOne(c net.Conn, dial VsockDialer, track func(net.Conn)) {
	defer func() { _ = c.Close() }()
	_ = c.SetReadDeadline(time.Now().Add(connectTimeout))
	port, err := readConnect(c)
	if err != nil {
		return
	}
	g, err := dial(port)
	if err != nil {
		return
	}
	track(g)
	defer func() { _ = g.Close() }()
	_ = c.SetReadDeadline(time.Time{})
	if _, err := io.WriteString(c, "OK "+strconv.FormatUint(uint64(port), 10)+"\n"); err != nil {
		return
	}
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(g, c); closeWrite(g); done <- struct{}{} }()
	go func() { _, _ = io.Copy(c, g); closeWrite(c); done <- struct{}{} }()
	<-done
	<-done
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		_ = cw.CloseWrite()
		return
	}
	_ = c.Close()
}

// readConnect reads one "CONNECT <port>\n" line byte by byte (nothing past the newline is
// consumed) and admits only the agent port.
func readConnect(r io.Reader) (uint32, error) {
	var line []byte
	b := make([]byte, 1)
	for {
		if _, err := io.ReadFull(r, b); err != nil {
			return 0, err
		}
		if b[0] == '\n' {
			break
		}
		if len(line) >= maxConnectLine {
			return 0, actuation.Refuse(actuation.CodeInvalidSpec, "", "request line above %d bytes", maxConnectLine)
		}
		line = append(line, b[0])
	}
	rest, ok := strings.CutPrefix(string(line), "CONNECT ")
	if !ok {
		return 0, actuation.Refuse(actuation.CodeInvalidSpec, "", "request %q is not CONNECT <port>", line)
	}
	port, err := strconv.ParseUint(rest, 10, 32)
	if err != nil || port != protocol.AgentPort {
		return 0, actuation.Refuse(actuation.CodeInvalidSpec, "", "port %q: only the guest agent's port %d is served", rest, protocol.AgentPort)
	}
	return uint32(port), nil
}

// WaitReady accepts the guest's one readiness connection on ln (the vsock listener on
// protocol.ReadyPort) and checks it carries protocol.ReadyLine, within timeout.
func WaitReady(ln net.Listener, timeout time.Duration) error {
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() {
		c, err := ln.Accept()
		ch <- res{c, err}
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	var r res
	select {
	case r = <-ch:
	case <-t.C:
		_ = ln.Close()
		return actuation.Refuse(actuation.CodeBootTimeout, "", "no readiness signal from the guest agent within %v", timeout)
	}
	if r.err != nil {
		return actuation.Refuse(actuation.CodeBootFailed, "", "readiness listener: %v", r.err)
	}
	defer func() { _ = r.c.Close() }()
	_ = r.c.SetReadDeadline(time.Now().Add(connectTimeout))
	line, err := bufio.NewReaderSize(io.LimitReader(r.c, int64(len(protocol.ReadyLine))), len(protocol.ReadyLine)).ReadString('\n')
	if err != nil || line != protocol.ReadyLine {
		return actuation.Refuse(actuation.CodeBootFailed, "", "readiness line %q, want %q", line, protocol.ReadyLine)
	}
	return nil
}

// SerialLog is the bounded diagnostic serial: the guest's output is appended to a file
// until max bytes, the rest counted and dropped. Nothing is ever written to the guest.
type SerialLog struct {
	mu      sync.Mutex
	f       *os.File
	max     int64
	written int64
	dropped int64
}

// OpenSerialLog creates path (0600, truncating) capped at max bytes.
func OpenSerialLog(path string, max int64) (*SerialLog, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, fmt.Errorf("serial log: %w", err)
	}
	return &SerialLog{f: f, max: max}, nil
}

// Write keeps what fits under the cap and reports the whole of p consumed.
func (s *SerialLog) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	room := s.max - s.written
	keep := int64(len(p))
	if keep > room {
		keep = max(room, 0)
	}
	if keep > 0 && s.f != nil {
		n, err := s.f.Write(p[:keep])
		s.written += int64(n)
		if err != nil {
			s.dropped += int64(len(p)) - int64(n)
			return len(p), nil // a full disk drops output; the guest is never blocked
		}
	}
	s.dropped += int64(len(p)) - keep
	return len(p), nil
}

// Stats returns the bytes kept and dropped.
func (s *SerialLog) Stats() (written, dropped int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.written, s.dropped
}

// Close closes the file.
func (s *SerialLog) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.f == nil {
		return nil
	}
	err := s.f.Close()
	s.f = nil
	return err
}
