package guestenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"sensorium.dev/workbench/guest/agent"
	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/test/testkit"
)

var (
	must     = testkit.Must
	wantCode = testkit.WantCode
)

// broker is a VM backend's broker for one real guest agent (in process, on the
// conformance Unix transport). channelErr, when set, is GuestChannel's answer.
type broker struct {
	ep         guestclient.Endpoint
	binding    protocol.Binding
	channelErr error
	dials      int
}

func (b *broker) Guest(ctx context.Context, id string) (*guestclient.Client, error) {
	if id != "env-1" {
		return nil, actuation.Refusef(actuation.CodeVMNotRunning, "no VM runs for environment %s on this node", id)
	}
	b.dials++
	conn, err := guestclient.Dial(ctx, b.ep)
	if err != nil {
		return nil, err
	}
	c, err := guestclient.Handshake(ctx, conn, b.binding)
	if err != nil {
		_ = conn.Close()
	}
	return c, err
}

func (b *broker) GuestChannel(string) (guestclient.Endpoint, protocol.Binding, error) {
	return b.ep, b.binding, b.channelErr
}

func newBroker(t *testing.T) *broker {
	t.Helper()
	base := t.TempDir()
	root, state := filepath.Join(base, "root"), filepath.Join(base, "state")
	for _, d := range []string{root, state, filepath.Join(root, "repo")} {
		must(t, os.Mkdir(d, 0o755))
	}
	nonce := make([]byte, 32)
	_, _ = rand.Read(nonce)
	b := &broker{binding: protocol.Binding{EnvironmentRef: "ns/e", SourceGeneration: 1, PlanDigest: protocol.DigestOf([]byte("plan")),
		ImageDigest: protocol.DigestOf([]byte("image")), GuestCID: 3, BootNonce: hex.EncodeToString(nonce)}}
	ga, err := agent.New(agent.Config{Root: root, StateDir: state, Binding: func() (protocol.Binding, error) { return b.binding, nil }})
	must(t, err)
	sock := filepath.Join(base, "agent.sock")
	l, err := net.Listen("unix", sock)
	must(t, err)
	served := make(chan struct{})
	go func() { defer close(served); _ = ga.Serve(l) }() // ends when the cleanup closes l
	t.Cleanup(func() { _ = l.Close(); <-served; _ = ga.Close() })
	b.ep = guestclient.Endpoint{Path: sock}
	return b
}

// TestGuestEnvSpawns: the guest Env of the port runs a command in the guest through the
// backend's broker (one channel per spawn) and reports its exit and output; the broker's
// refusal of an environment it does not run passes through with its code; what the guest
// cannot do (action classes) is the executor's refusal with its code.
func TestGuestEnvSpawns(t *testing.T) {
	b := newBroker(t)
	e := Open(b, "env-1")
	if _, ok := e.Exec.(executor); !ok || e.Roots == nil || e.ID != "env-1" {
		t.Fatalf("Open = %+v, want a guest Env", e)
	}
	if ref := e.Exec.ActionClasses(); ref == nil || ref.Code != actuation.CodeActionClassUnavailable {
		t.Fatalf("ActionClasses = %v, want %s", ref, actuation.CodeActionClassUnavailable)
	}
	roots := []backends.MountedRoot{{Name: "repo", GuestDir: "repo"}}
	in := actuation.CommandIntent{Argv: []string{"/bin/sh", "-c", "echo out; echo err >&2; exit 3"}, TimeoutSeconds: 10, OutputBytes: 4096}
	in.Cwd.Root = "repo"
	req := backends.CommandRequest{Roots: roots, Intent: in, Env: []actuation.EnvVar{{Name: "LANG", Value: "C"}}}
	c, ref := e.Exec.Command(req)
	if ref != nil {
		t.Fatal(ref)
	}
	gc := c.Remote.(remote).gc
	if c.Sandbox != nil || gc.Args.Cwd != "repo" || !slices.Equal(gc.Args.Env, []string{"LANG=C"}) || gc.Args.TimeoutMS != 10000 || c.Remote.Wait() <= 10*time.Second {
		t.Fatalf("command = %+v", c)
	}
	res, err := c.Remote.Run(context.Background(), "cmd-1")
	must(t, err)
	if res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" || b.dials != 1 {
		t.Fatalf("spawn = exit %d stdout %q stderr %q after %d dials", res.ExitCode, res.Stdout, res.Stderr, b.dials)
	}
	c2, ref := Open(b, "env-2").Exec.Command(req)
	if ref != nil {
		t.Fatal(ref)
	}
	_, err = c2.Remote.Run(context.Background(), "cmd-2")
	wantCode(t, err, string(actuation.CodeVMNotRunning))
	if c := c2.Remote.RefusalCode(err); c != actuation.CodeVMNotRunning {
		t.Fatalf("RefusalCode = %q", c)
	}
	bad := req
	bad.Intent.Cwd.Root = "other"
	if _, ref := e.Exec.Command(bad); ref == nil || ref.Code != actuation.CodeRootNotAllowed {
		t.Fatalf("command in a root the environment lacks: %v", ref)
	}
	bad = req
	bad.Intent.TimeoutSeconds = 0
	if _, ref := e.Exec.Command(bad); ref == nil || ref.Code != actuation.CodeTimeoutAboveMax {
		t.Fatalf("command without a timeout: %v", ref)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Remote.Run(ctx, "cmd-3"); err == nil {
		t.Fatal("a spawn under an ended context succeeded")
	}
}

// TestGuestEnvRelay: a PTY session of a guest Env runs the node agent's own executable in
// relay mode with one configuration entry naming the broker's pinned endpoint and binding;
// a session the guest protocol would refuse, a broker without a channel and an agent
// without an executable are refused with stable codes before anything starts.
func TestGuestEnvRelay(t *testing.T) {
	b := newBroker(t)
	g := Open(b, "env-1").Exec.(executor).e
	argv, env, err := g.Relay("/usr/local/bin/node-agent", relayRequest{SessionID: "s-1", Argv: []string{"/bin/sh"}, Env: []string{"TERM=xterm"}, Cwd: "repo"})
	must(t, err)
	if !slices.Equal(argv, []string{"/usr/local/bin/node-agent", RelayArg}) || len(env) != 1 || !strings.HasPrefix(env[0], RelayEnvKey+"=") {
		t.Fatalf("relay argv %q env %q", argv, env)
	}
	var cfg RelayConfig
	must(t, json.Unmarshal([]byte(strings.TrimPrefix(env[0], RelayEnvKey+"=")), &cfg))
	if cfg.Endpoint != b.ep || cfg.Binding != b.binding || cfg.SessionID != "s-1" || !slices.Equal(cfg.Argv, []string{"/bin/sh"}) || cfg.Cwd != "repo" {
		t.Fatalf("relay config %+v", cfg)
	}

	_, _, err = g.Relay("/bin/agent", relayRequest{SessionID: "../s", Argv: []string{"/bin/sh"}})
	wantCode(t, err, string(actuation.CodeInvalidSpec))
	_, _, err = g.Relay("", relayRequest{SessionID: "s-1", Argv: []string{"/bin/sh"}})
	wantCode(t, err, string(actuation.CodeCapabilityMismatch))
	b.channelErr = actuation.Refusef(actuation.CodeVMNotRunning, "no VM")
	_, _, err = g.Relay("/bin/agent", relayRequest{SessionID: "s-1", Argv: []string{"/bin/sh"}})
	wantCode(t, err, string(actuation.CodeVMNotRunning))
	b.channelErr = errors.New("socket gone")
	_, _, err = g.Relay("/bin/agent", relayRequest{SessionID: "s-1", Argv: []string{"/bin/sh"}})
	wantCode(t, err, string(actuation.CodeEnvironmentUnavailable))
}

// TestGuestTerminalAndRoots: through the port, a guest Env's PTY program runs in the
// guest (the host program is the relay, in "/", seeing no host root) and a refusal of the
// relay keeps its code; its roots are opened in the guest without consulting the node's
// pinned roots, read through the guest protocol, and refuse what the guest cannot do —
// file waits (no change notifications) and git-patch exports — with their codes.
func TestGuestTerminalAndRoots(t *testing.T) {
	b := newBroker(t)
	e := Open(b, "env-1")
	roots := []backends.MountedRoot{{Name: "repo", GuestDir: "repo"}}
	req := backends.TerminalRequest{Profile: actuation.Profile{AllowedRoots: []string{"repo"}}, Roots: roots, SessionID: "s-1",
		Argv: []string{"/bin/sh"}, Env: []string{"TERM=xterm"}, Relay: "/usr/local/bin/node-agent"}
	term, ref := e.Exec.Terminal(req)
	if ref != nil {
		t.Fatal(ref)
	}
	if !term.HostRelay || term.Dir != "/" || !slices.Equal(term.Argv, []string{"/usr/local/bin/node-agent", RelayArg}) ||
		len(term.WritableRoots)+len(term.ReadableRoots) != 0 || len(term.Env) != 1 {
		t.Fatalf("terminal = %+v", term)
	}
	none := req
	none.Profile.AllowedRoots = []string{"other"}
	if _, ref := e.Exec.Terminal(none); ref == nil || ref.Code != actuation.CodeRootNotAllowed {
		t.Fatalf("terminal with no allowed root: %v", ref)
	}
	b.channelErr = actuation.Refusef(actuation.CodeVMNotRunning, "no VM")
	if _, ref := e.Exec.Terminal(req); ref == nil || ref.Code != actuation.CodeVMNotRunning || ref.Message != "no VM" {
		t.Fatalf("terminal without a VM: %v", ref)
	}
	b.channelErr = nil

	f, err := e.Roots.OpenRoot(roots[0], func() (*fsaccess.Root, error) {
		t.Fatal("a guest root consulted the node's pinned roots")
		return nil, nil
	})
	must(t, err)
	if _, err := f.Snapshot(context.Background(), "", fsaccess.SnapshotLimits{}); err != nil {
		t.Fatalf("snapshot of a guest root: %v", err)
	}
	if _, err := f.Watch(); actuation.CodeOf(err) != actuation.CodeCapabilityMismatch {
		t.Fatalf("Watch of a guest root: %v", err)
	}
	if _, err := f.GitPatchRoot(); actuation.CodeOf(err) != actuation.CodeExportInvalid {
		t.Fatalf("GitPatchRoot of a guest root: %v", err)
	}
	if f.Origin() == "" {
		t.Fatal("a guest root's origin is empty")
	}
	if _, err := e.Roots.OpenRoot(backends.MountedRoot{Name: "host", Path: "/tmp"}, nil); actuation.CodeOf(err) != actuation.CodeCapabilityMismatch {
		t.Fatalf("root without a guest directory: %v", err)
	}
}
