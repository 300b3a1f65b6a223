//go:build linux

package procexec

import (
	"fmt"
	"os"
)

// PrestartedTerminal is a sandbox helper started ahead of a PTY session: cloned into its
// namespaces and exec'd as the session leader of a terminal (its controlling terminal and
// standard descriptors), then blocked on its configuration socket, having done nothing
// else. Start configures it for one program exactly as StartSandboxed configures a helper
// it has just started (roots, mounts, capability drop, Landlock, seccomp: all per
// program, then); a helper serves once. It is what takes the helper's start (most of a
// sandbox's start) off a session's open, as the Runner's pre-started sandboxes do for
// commands — a terminal helper needs its terminal when it is cloned, so the session
// layer keeps each one with the PTY it was started on.
type PrestartedTerminal struct {
	hp *helperProc
}

// PrestartTerminal starts a helper on tty (the slave side of a PTY the caller keeps open).
func PrestartTerminal(helperPath string, uid uint32, tty *os.File) (*PrestartedTerminal, error) {
	if tty == nil {
		return nil, fmt.Errorf("procexec: pre-start a terminal helper: no terminal")
	}
	hp, err := startHelper(StartOptions{HelperPath: helperPath, UID: uid, Stdin: tty, Stdout: tty, Stderr: tty, Terminal: true})
	if err != nil {
		return nil, err
	}
	return &PrestartedTerminal{hp: hp}, nil
}

// Pid is the helper's pid (the future PID 1 of the sandbox and leader of its session).
func (p *PrestartedTerminal) Pid() int { return p.hp.pid }

// Alive reports whether the helper is still waiting (not exited; it is this process's
// unreaped child, so its /proc entry exists until it is reaped).
func (p *PrestartedTerminal) Alive() bool {
	st, err := ReadStat(p.hp.pid)
	return err == nil && st.State != 'Z' && st.State != 'X'
}

// Start configures the helper for spec (spec.TTY is the terminal it was started on) and
// returns once the program has been exec'd or the sandbox refused, like StartSandboxed.
// before runs first (e.g. placing the helper in the session's cgroup). On any failure the
// helper is discarded.
func (p *PrestartedTerminal) Start(spec SandboxSpec, before func(pid int) error) (*Sandboxed, error) {
	cfg, idmaps, err := prepareSandbox(spec)
	if err != nil {
		p.hp.discard()
		return nil, err
	}
	return p.hp.configure(cfg, idmaps, before, nil)
}

// Discard kills and reaps a helper that will not be configured.
func (p *PrestartedTerminal) Discard() { p.hp.discard() }
