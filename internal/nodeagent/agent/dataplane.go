package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"syscall"

	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/dataplane"
	"sensorium.dev/workbench/internal/nodeagent/refusal"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/session"
)

// structuredTerminal is the data-plane face of a session without a PTY program: its event
// ring records the output of its structured commands; there is no screen and no raw input.
type structuredTerminal struct{ rg *ring.Ring }

var errNoPTY = refusal.New(string(actuation.CodeNoPTY), "this session runs no PTY program; use structured commands")

func (t structuredTerminal) Screen() session.Snapshot { return session.Snapshot{} }
func (t structuredTerminal) Events() *ring.Ring       { return t.rg }
func (t structuredTerminal) Read(c uint64, max int) ([]ring.Event, uint64, *ring.Gap) {
	return t.rg.Read(c, max)
}
func (t structuredTerminal) WaitEvents(ctx context.Context, after uint64) error {
	return t.rg.Wait(ctx, after)
}
func (t structuredTerminal) Input([]byte) error          { return errNoPTY }
func (t structuredTerminal) Resize(uint16, uint16) error { return errNoPTY }
func (t structuredTerminal) Signal(syscall.Signal) error { return errNoPTY }
func (t structuredTerminal) Phase() session.Phase        { return session.PhaseRunning }

// resolver finds live sessions and mounted roots for the data plane, only on this node.
type resolver struct{ a *Agent }

func (r resolver) Session(ns, name string) (dataplane.Terminal, dataplane.SessionInfo, error) {
	a := r.a
	var ts wbv1.TerminalSession
	if err := a.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, &ts); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, dataplane.SessionInfo{}, fmt.Errorf("session %s/%s: %w", ns, name, dataplane.ErrNotFound)
		}
		return nil, dataplane.SessionInfo{}, err
	}
	a.mu.Lock()
	live := a.sess[string(ts.UID)]
	a.mu.Unlock()
	if live == nil || live.closed {
		return nil, dataplane.SessionInfo{}, fmt.Errorf("session %s/%s is not open on this node: %w", ns, name, dataplane.ErrNotFound)
	}
	info := dataplane.SessionInfo{RawInput: ts.Spec.RawInput}
	if live.pty != nil {
		return live.pty, info, nil
	}
	return structuredTerminal{rg: live.ring}, info, nil
}

func (r resolver) Root(ns, env, root string) (dataplane.Files, error) {
	a := r.a
	var e wbv1.Environment
	if err := a.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: env}, &e); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return nil, fmt.Errorf("environment %s/%s: %w", ns, env, dataplane.ErrNotFound)
		}
		return nil, err
	}
	roots, ok := a.mountedRoots(string(e.UID))
	if !ok {
		return nil, fmt.Errorf("environment %s/%s is not ready on this node: %w", ns, env, dataplane.ErrNotFound)
	}
	for _, mr := range roots {
		if mr.Name == root {
			ra, err := a.openRootAccess(&e, mr)
			if err != nil {
				return nil, err
			}
			return ra.files(), nil
		}
	}
	return nil, fmt.Errorf("root %s of environment %s/%s: %w", root, ns, env, dataplane.ErrNotFound)
}

// startDataPlane serves the node's HTTPS data plane and publishes its address and CA.
func (a *Agent) startDataPlane(ctx context.Context) error {
	if a.cfg.DataPlaneAddress == "" {
		return nil
	}
	hosts := a.cfg.DataPlaneHosts
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
	}
	cert, caPEM, err := dataplane.GenerateServingCert(hosts)
	if err != nil {
		return err
	}
	authn, err := dataplane.NewTokenReviewAuthenticator(a.client, dataplane.TokenReviewOptions{})
	if err != nil {
		return err
	}
	authz, err := dataplane.NewSubjectAccessReviewAuthorizer(a.client, dataplane.CacheOptions{})
	if err != nil {
		return err
	}
	srv, err := dataplane.New(dataplane.Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Authenticator: authn, Authorizer: authz, Resolver: resolver{a: a}})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", a.cfg.DataPlaneAddress)
	if err != nil {
		return fmt.Errorf("listening for the data plane on %s: %w", a.cfg.DataPlaneAddress, err)
	}
	endpoint := "https://" + ln.Addr().String()
	if h, p, err := net.SplitHostPort(ln.Addr().String()); err == nil && (h == "::" || h == "0.0.0.0") {
		endpoint = "https://" + net.JoinHostPort(hosts[0], p)
	}
	a.mu.Lock()
	a.dataPlane = &wbv1.DataPlane{Endpoint: endpoint, CABundle: string(caPEM)}
	a.mu.Unlock()
	go func() {
		if err := srv.ServeListener(ctx, ln); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Serving the data plane")
		}
	}()
	return nil
}
