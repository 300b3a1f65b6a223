// The guest PTY relay: an interactive terminal session into a VM guest. The node agent
// runs its own executable in relay mode (RelayArg, served by MaybeRunRelay in the agent
// binary's main) as the program of an ordinary host PTY session
// (internal/nodeagent/session), so the host session machinery — event ring, screen
// model, idle and duration limits, operator input, resize, signals, close and crash
// recovery of the relay's process group — applies unchanged. The relay opens a PTY in
// the guest over the guest protocol and copies bytes both ways with its own terminal in
// raw mode: the guest's line discipline echoes and interprets, the host's passes bytes
// through. A window change on the host terminal (SIGWINCH) becomes a guest resize;
// SIGINT, SIGQUIT, SIGTSTP and SIGCONT are forwarded to the guest session's process
// group; SIGHUP or SIGTERM close the guest session and end the relay. The relay exits
// with the guest program's exit status.
//
// The relay's configuration (guest endpoint with its pinned socket identity, the boot's
// binding, argv, environment, working directory) arrives in one environment variable set
// by the node agent; nothing of it comes from a caller. The sandbox helper
// (cmd/workbench-sandbox, internal/platform/procexec) knows nothing of it.

package guestenv

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/guestclient"
)

// RelayArg is the relay's one argument; RelayEnvKey carries its JSON configuration.
const (
	RelayArg    = "__workbench-guest-pty-relay"
	RelayEnvKey = "WORKBENCH_GUEST_PTY_RELAY"
)

// RelayConfig is the relay's configuration.
type RelayConfig struct {
	Endpoint  guestclient.Endpoint `json:"endpoint"`
	Binding   protocol.Binding     `json:"binding"`
	SessionID string               `json:"sessionID"`
	Argv      []string             `json:"argv"`
	Env       []string             `json:"env,omitempty"`
	Cwd       string               `json:"cwd,omitempty"`
}

// Environ returns the relay's environment entry for cfg.
func (c RelayConfig) Environ() (string, error) {
	b, err := json.Marshal(c)
	if err != nil {
		return "", fmt.Errorf("guest pty relay config: %w", err)
	}
	return RelayEnvKey + "=" + string(b), nil
}

// Bounds.
const (
	readChunk   = 64 << 10
	readWaitMS  = 2000
	opTimeout   = 15 * time.Second
	maxConfig   = 64 << 10
	failureExit = 125
)

// MaybeRunRelay runs the relay and exits if this process was started as one; otherwise
// it returns at once. The node agent's main (and every test binary the agent re-executes
// as its relay) calls it first, next to procexec.MaybeRunHelper.
func MaybeRunRelay() {
	if len(os.Args) != 2 || os.Args[1] != RelayArg {
		return
	}
	raw := os.Getenv(RelayEnvKey)
	if raw == "" || len(raw) > maxConfig {
		fmt.Fprintln(os.Stderr, "guest pty relay: no configuration")
		os.Exit(failureExit)
	}
	var cfg RelayConfig
	if err := json.Unmarshal([]byte(raw), &cfg); err != nil {
		fmt.Fprintln(os.Stderr, "guest pty relay:", err)
		os.Exit(failureExit)
	}
	_ = os.Unsetenv(RelayEnvKey) // fails only for an invalid key; EnvKey is a constant
	os.Exit(runRelay(cfg))
}

func opCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), opTimeout)
}

func runRelay(cfg RelayConfig) int {
	fail := func(format string, args ...any) int {
		fmt.Fprintf(os.Stdout, "\r\nworkbench: guest terminal: "+format+"\r\n", args...)
		return failureExit
	}
	in, out := os.Stdin, os.Stdout
	// Raw mode on the host terminal: bytes pass unchanged both ways.
	if t, err := unix.IoctlGetTermios(int(in.Fd()), ioctlGetTermios); err == nil {
		raw := *t
		raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
		raw.Oflag &^= unix.OPOST
		raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
		raw.Cflag &^= unix.CSIZE | unix.PARENB
		raw.Cflag |= unix.CS8
		raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
		_ = unix.IoctlSetTermios(int(in.Fd()), ioctlSetTermios, &raw)
	}
	rows, cols := uint16(24), uint16(80)
	if ws, err := unix.IoctlGetWinsize(int(in.Fd()), unix.TIOCGWINSZ); err == nil && ws.Row > 0 && ws.Col > 0 {
		rows, cols = ws.Row, ws.Col
	}

	ctx, cancel := opCtx()
	ctl, err := guestclient.Connect(ctx, cfg.Endpoint, cfg.Binding)
	cancel()
	if err != nil {
		return fail("connect: %v", err)
	}
	defer func() { _ = ctl.Close() }()
	ctx, cancel = opCtx()
	rd, err := guestclient.Connect(ctx, cfg.Endpoint, cfg.Binding)
	cancel()
	if err != nil {
		return fail("connect: %v", err)
	}
	defer func() { _ = rd.Close() }()
	ctx, cancel = opCtx()
	_, err = ctl.PTYOpen(ctx, "", protocol.PTYOpenArgs{SessionID: cfg.SessionID, Argv: cfg.Argv, Env: cfg.Env, Cwd: cfg.Cwd, Rows: rows, Cols: cols})
	cancel()
	if err != nil {
		return fail("open: %v", err)
	}

	var mu sync.Mutex // one request at a time on ctl
	control := func(f func(ctx context.Context) error) error {
		mu.Lock()
		defer mu.Unlock()
		ctx, cancel := opCtx()
		defer cancel()
		return f(ctx)
	}
	closeGuest := func() {
		_ = control(func(ctx context.Context) error { return ctl.PTYClose(ctx, "", cfg.SessionID) })
	}

	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGWINCH, unix.SIGINT, unix.SIGQUIT, unix.SIGTSTP, unix.SIGCONT, unix.SIGHUP, unix.SIGTERM)
	done := make(chan int, 1)

	// Guest output → host terminal, until the guest program exited and its output drained.
	go func() {
		var off uint64
		for {
			ctx, cancel := context.WithTimeout(context.Background(), opTimeout+readWaitMS*time.Millisecond)
			d, b, err := rd.PTYRead(ctx, "", protocol.PTYReadArgs{SessionID: cfg.SessionID, Offset: off, Max: readChunk, WaitMS: readWaitMS})
			cancel()
			if err != nil {
				fmt.Fprintf(out, "\r\nworkbench: guest terminal: %v\r\n", err)
				done <- failureExit
				return
			}
			if len(b) > 0 {
				if _, err := out.Write(b); err != nil {
					done <- failureExit
					return
				}
			}
			off = d.Next
			if d.Exited && len(b) == 0 {
				switch {
				case d.Signal != "":
					done <- 128 + int(unix.SignalNum(d.Signal))
				default:
					done <- d.ExitCode & 0xff
				}
				return
			}
		}
	}()
	// Host terminal → guest input.
	go func() {
		buf := make([]byte, protocol.MaxPTYInput)
		for {
			n, err := in.Read(buf)
			if n > 0 {
				data := append([]byte(nil), buf[:n]...)
				if werr := control(func(ctx context.Context) error { _, err := ctl.PTYInput(ctx, "", cfg.SessionID, data); return err }); werr != nil {
					if !errors.Is(werr, guestclient.ErrBroken) {
						fmt.Fprintf(out, "\r\nworkbench: guest terminal input: %v\r\n", werr)
					}
					return
				}
			}
			if err != nil { // EOF or a closed terminal: the session is ending
				return
			}
		}
	}()
	for {
		select {
		case code := <-done:
			return code
		case s := <-sigs:
			switch s {
			case unix.SIGWINCH:
				if ws, err := unix.IoctlGetWinsize(int(in.Fd()), unix.TIOCGWINSZ); err == nil && ws.Row > 0 && ws.Col > 0 {
					_ = control(func(ctx context.Context) error { return ctl.PTYResize(ctx, "", cfg.SessionID, ws.Row, ws.Col) })
				}
			case unix.SIGHUP, unix.SIGTERM:
				closeGuest()
				select {
				case code := <-done:
					return code
				case <-time.After(opTimeout):
					return failureExit
				}
			default:
				name := unix.SignalName(s.(unix.Signal))
				_ = control(func(ctx context.Context) error { return ctl.Signal(ctx, "", cfg.SessionID, name) })
			}
		}
	}
}
