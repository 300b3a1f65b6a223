package session

import (
	"fmt"
	"os"

	"github.com/creack/pty"

	"sensorium.dev/workbench/internal/platform/procexec"
)

// MaxPrestartedSessions caps Caps.PrestartedSessions (larger values are clamped to it).
const MaxPrestartedSessions = 4

// DefaultPrestartedSessions is the pool size an unset Caps.PrestartedSessions selects: two,
// so that a session opened while another one's open is refilling the pool still finds one
// (docs/benchmarks.md, "Terminal output throughput", has the figures).
const DefaultPrestartedSessions = 2

// Pre-started session sandboxes (issue 13 item 3): a sandboxed session's open is mostly
// its sandbox helper's start (cloned into its namespaces and exec'd), which does not
// depend on the program. The Manager keeps Caps.PrestartedSessions helpers started ahead
// in procexec's one pre-started pool (procexec.Pool), each on a PTY of its own and
// waiting for its configuration; Open takes one and configures it for the session's
// program exactly as a fresh helper (procexec.PrestartedTerminal: the session's cgroup,
// roots, mounts, capability drop, Landlock and seccomp per program, then). A helper serves
// one session; nothing of it is shared. The pool refills only while no session is
// starting: once a start that emptied it is done, and as a session ends. On by default;
// a negative Caps.PrestartedSessions turns it off (an idle helper costs a process and a PTY).

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

func (p *preTerm) alive() bool { return p.pt.Alive() }

// newPrestartPool is the manager's pool (nil when Caps.PrestartedSessions is 0 after
// defaults, i.e. turned off).
func (m *Manager) newPrestartPool() *procexec.Pool[*preTerm] {
	return procexec.NewPool(procexec.PoolOptions[*preTerm]{
		Size:    m.caps.PrestartedSessions,
		Start:   m.prestartOne,
		Discard: (*preTerm).discard,
		Alive:   (*preTerm).alive,
		Busy:    func() bool { return m.starting.Load() > 0 },
	})
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

// takePrestarted returns a waiting helper with its PTY, or nil.
func (m *Manager) takePrestarted() *preTerm {
	pre, ok := m.pre.Take()
	if ok {
		m.preTaken.Add(1)
	}
	return pre
}

// PrestartedTaken counts the sessions opened on a pre-started helper.
func (m *Manager) PrestartedTaken() uint64 { return m.preTaken.Load() }

// refillAfterStart refills the pool once a start is done if that start left it empty (a
// pool that still holds one waits for a session's end: the refill then competes with
// nothing that starts).
func (m *Manager) refillAfterStart() {
	if len(m.pre.Idle()) == 0 {
		m.pre.Refill()
	}
}

// RefillPrestarted starts filling the pre-started pool in the background (the agent calls
// it once its recovery sweep is done, so that the first session finds one).
func (m *Manager) RefillPrestarted() { m.pre.Refill() }

// WarmPrestarted returns once Caps.PrestartedSessions helpers are waiting (it waits for
// the background refills, then starts what is missing itself), or with the error of a
// start that failed. The agent warms at start; benchmarks warm so that no refill runs
// during a measurement.
func (m *Manager) WarmPrestarted() error { return m.pre.Warm() }
