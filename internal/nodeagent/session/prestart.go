package session

import (
	"fmt"
	"os"
	"sync"

	"github.com/creack/pty"

	"sensorium.dev/workbench/internal/platform/procexec"
)

// MaxPrestartedSessions caps Caps.PrestartedSessions (larger values are clamped to it).
const MaxPrestartedSessions = 4

// Pre-started session sandboxes (issue 13 item 3): a sandboxed session's open is mostly
// its sandbox helper's start (cloned into its namespaces and exec'd), which does not
// depend on the program. A Manager with Caps.PrestartedSessions > 0 keeps that many
// helpers started ahead, each on a PTY of its own and waiting for its configuration; Open
// takes one and configures it for the session's program (procexec.PrestartedTerminal:
// roots, mounts, Landlock and seccomp per program, then), and the pool refills in the
// background. A helper serves one session; nothing of it is shared. Off by default (0):
// an idle helper costs a process and a PTY.

// preTerm is one pre-started helper and the PTY it was started on.
type preTerm struct {
	master, tty *os.File
	pt          *procexec.PrestartedTerminal
}

func (p *preTerm) discard() {
	p.pt.Discard()
	_ = p.master.Close()
	_ = p.tty.Close()
}

type prestartPool struct {
	mu      sync.Mutex
	idle    []*preTerm
	filling int
	closed  bool
	fills   sync.WaitGroup
}

// prestartOne opens a PTY and starts a helper on it.
func (m *Manager) prestartOne() (*preTerm, error) {
	master, tty, err := pty.Open()
	if err != nil {
		return nil, fmt.Errorf("pre-start a session sandbox: allocate pty: %w", err)
	}
	if master, err = pollableMaster(master); err != nil {
		_ = tty.Close()
		return nil, fmt.Errorf("pre-start a session sandbox: %w", err)
	}
	pt, err := procexec.PrestartTerminal(m.sandbox.HelperPath, m.sandbox.UID, tty)
	if err != nil {
		_ = master.Close()
		_ = tty.Close()
		return nil, fmt.Errorf("pre-start a session sandbox: %w", err)
	}
	return &preTerm{master: master, tty: tty, pt: pt}, nil
}

// refillPrestarted starts helpers in the background until the pool holds its size. A
// failed start is not retried until the next take.
func (m *Manager) refillPrestarted() {
	p := &m.pre
	p.mu.Lock()
	n := m.caps.PrestartedSessions - len(p.idle) - p.filling
	if p.closed || n <= 0 {
		p.mu.Unlock()
		return
	}
	p.filling += n
	p.fills.Add(1)
	p.mu.Unlock()
	go func() {
		defer p.fills.Done()
		for range n {
			pre, err := m.prestartOne()
			p.mu.Lock()
			p.filling--
			switch {
			case err != nil:
			case p.closed:
				defer pre.discard()
			default:
				p.idle = append(p.idle, pre)
			}
			p.mu.Unlock()
		}
	}()
}

// takePrestarted returns a waiting helper with its PTY (and starts refilling), or nil.
func (m *Manager) takePrestarted() *preTerm {
	if m.caps.PrestartedSessions <= 0 {
		return nil
	}
	defer m.refillPrestarted()
	p := &m.pre
	for {
		p.mu.Lock()
		if p.closed || len(p.idle) == 0 {
			p.mu.Unlock()
			return nil
		}
		pre := p.idle[0]
		p.idle = p.idle[1:]
		p.mu.Unlock()
		if pre.pt.Alive() {
			return pre
		}
		pre.discard() // killed from outside while it waited
	}
}

// WarmPrestarted returns once Caps.PrestartedSessions helpers are waiting (it waits for
// the background refills, then starts what is missing itself), or with the error of a
// start that failed. Benchmarks call it so that no refill runs during a measurement.
func (m *Manager) WarmPrestarted() error {
	p := &m.pre
	p.fills.Wait()
	for {
		p.mu.Lock()
		if p.closed || len(p.idle) >= m.caps.PrestartedSessions {
			p.mu.Unlock()
			return nil
		}
		p.mu.Unlock()
		pre, err := m.prestartOne()
		if err != nil {
			return err
		}
		p.mu.Lock()
		if p.closed {
			p.mu.Unlock()
			pre.discard()
			return nil
		}
		p.idle = append(p.idle, pre)
		p.mu.Unlock()
	}
}

// closePrestarted discards the waiting helpers and stops refilling (Shutdown).
func (m *Manager) closePrestarted() {
	p := &m.pre
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.mu.Unlock()
	for _, pre := range idle {
		pre.discard()
	}
	p.fills.Wait() // an in-flight refill discards what it started
}
