package qemumicrovm

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"sync"
	"time"
)

// The QEMU machine protocol (QMP) monitor of a VM. QEMU never listens: its monitor
// chardev connects to a broker-owned listener (m.sock, removed once QEMU connected, as the
// serial's), so only this process can drive the VM. The chardev reconnects every second
// when its peer goes away, so a later agent process that adopts the VM listens again and
// gets the monitor back (monitorOf). The broker sends a closed set of commands: stop,
// cont, query-status, and the migration commands of snapshot.go.
const (
	monitorSock = "m.sock"
	// qmpMaxMessage caps one QMP message the broker reads (QEMU's answers to the closed
	// command set are a few hundred bytes).
	qmpMaxMessage = 64 << 10
	// qmpTimeout bounds one command's round trip.
	qmpTimeout = 10 * time.Second
	// monitorReconnectWait bounds the wait for an adopted VM's QEMU to reconnect its
	// monitor (it retries every second).
	monitorReconnectWait = 3 * time.Second
)

// qmpConn is one QMP session; commands are serialised.
type qmpConn struct {
	mu sync.Mutex
	c  net.Conn
	r  *bufio.Reader
}

// qmpError is QEMU's refusal of a command ({"error": {"class", "desc"}}), kept verbatim.
type qmpError struct {
	Command string
	Class   string
	Desc    string
}

func (e *qmpError) Error() string {
	return fmt.Sprintf("QEMU refused %s: %s: %s", e.Command, e.Class, e.Desc)
}

// listenMonitor creates the listener QEMU's monitor chardev connects to.
func listenMonitor(path string) (*net.UnixListener, error) {
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("monitor listener %s: %w", path, err)
	}
	ln.SetUnlinkOnClose(true)
	return ln, nil
}

// acceptMonitor accepts QEMU's connection (until deadline), removes the listener, reads
// the greeting and negotiates capabilities.
func acceptMonitor(ln *net.UnixListener, deadline time.Time) (*qmpConn, error) {
	_ = ln.SetDeadline(deadline)
	c, err := ln.Accept()
	_ = ln.Close() // unlinks the socket: one peer
	if err != nil {
		return nil, fmt.Errorf("QEMU monitor did not connect: %w", err)
	}
	q := &qmpConn{c: c, r: bufio.NewReaderSize(c, 4096)}
	_ = c.SetDeadline(time.Now().Add(qmpTimeout))
	var greeting struct {
		QMP *json.RawMessage `json:"QMP"`
	}
	line, err := q.readMessage()
	if err == nil {
		err = json.Unmarshal(line, &greeting)
	}
	if err == nil && greeting.QMP == nil {
		err = errors.New("no QMP greeting")
	}
	if err != nil {
		_ = c.Close()
		return nil, fmt.Errorf("QEMU monitor greeting: %w", err)
	}
	if err := q.executeLocked("qmp_capabilities", nil, nil); err != nil {
		_ = c.Close()
		return nil, err
	}
	return q, nil
}

// readMessage reads one newline-terminated message of at most qmpMaxMessage bytes.
func (q *qmpConn) readMessage() ([]byte, error) {
	var msg []byte
	for {
		part, err := q.r.ReadSlice('\n')
		if len(msg)+len(part) > qmpMaxMessage {
			return nil, fmt.Errorf("QMP message above %d bytes", qmpMaxMessage)
		}
		msg = append(msg, part...)
		switch {
		case err == nil:
			return msg, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		default:
			return nil, err
		}
	}
}

// execute runs one command and decodes its return value into out (when not nil).
// Asynchronous events QEMU interleaves (STOP, RESUME, MIGRATION…) are skipped.
func (q *qmpConn) execute(ctx context.Context, cmd string, args, out any) error {
	if q == nil {
		return errors.New("no QEMU monitor")
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	deadline := time.Now().Add(qmpTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = q.c.SetDeadline(deadline)
	return q.executeLocked(cmd, args, out)
}

func (q *qmpConn) executeLocked(cmd string, args, out any) error {
	req := map[string]any{"execute": cmd}
	if args != nil {
		req["arguments"] = args
	}
	b, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if _, err := q.c.Write(append(b, '\n')); err != nil {
		return fmt.Errorf("QMP %s: %w", cmd, err)
	}
	for {
		line, err := q.readMessage()
		if err != nil {
			return fmt.Errorf("QMP %s: %w", cmd, err)
		}
		var resp struct {
			Event  string          `json:"event"`
			Return json.RawMessage `json:"return"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line, &resp); err != nil {
			return fmt.Errorf("QMP %s: %w", cmd, err)
		}
		switch {
		case resp.Event != "":
			continue
		case resp.Error != nil:
			return &qmpError{Command: cmd, Class: resp.Error.Class, Desc: resp.Error.Desc}
		case resp.Return == nil:
			return fmt.Errorf("QMP %s: an answer with neither return nor error", cmd)
		}
		if out != nil {
			if err := json.Unmarshal(resp.Return, out); err != nil {
				return fmt.Errorf("QMP %s: %w", cmd, err)
			}
		}
		return nil
	}
}

func (q *qmpConn) close() {
	if q != nil {
		_ = q.c.Close()
	}
}

// runState asks QEMU for the VM's run state (query-status: "running", "paused", …).
func (q *qmpConn) runState(ctx context.Context) (string, error) {
	var st struct {
		Status  string `json:"status"`
		Running bool   `json:"running"`
	}
	if err := q.execute(ctx, "query-status", nil, &st); err != nil {
		return "", err
	}
	return st.Status, nil
}
