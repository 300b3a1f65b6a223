// Package dataplane is the node agent's HTTPS data plane: the v2 routes of the
// aggregated subresource API (docs/api-subresources.md; v2.go lists them) — attach,
// screen, events, resize and signal of PTY sessions, output and cancel of terminal
// commands, files beneath environment roots, artifact download and upload, view
// streams (DESIGN.md §6, §9). Its wire contract (paths, headers, bodies, the Status of
// a refusal) is internal/dataplane/protocol/v2, which workbench-apiserver imports too.
//
// Every request carries the caller's Kubernetes bearer token, or comes from the
// aggregated API server's client certificate naming the end user (forward.go). The
// token is authenticated with TokenReview and each route is authorized as a virtual
// subresource of group subresources.workbench.sensorium.dev with SubjectAccessReview.
//
// Stdin on an attach additionally requires the session's spec.rawInput to be
// OperatorOnly. Every failure is a metav1.Status body with a stable code (session,
// fsaccess and actuation codes pass through). Everything is bounded: bodies, headers,
// reads, event batches, streams and their number, requests in flight, and the
// authentication and authorization caches. Followed streams park on the session's
// event ring; nothing sleeps.
package dataplane

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log"
	"net"
	"net/http"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/fairshare"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// Defaults and ceilings of Limits.
const (
	DefaultMaxInFlight       = 256
	CeilingMaxInFlight       = 4096
	DefaultMaxLongPolls      = 64
	MaxWait                  = 30 * time.Second
	DefaultRequestTimeout    = 10 * time.Second
	CeilingRequestTimeout    = time.Minute
	DefaultReadHeaderTimeout = 5 * time.Second
	DefaultReadTimeout       = 10 * time.Second
	DefaultIdleTimeout       = 90 * time.Second
	DefaultMaxHeaderBytes    = 16 << 10
	CeilingMaxHeaderBytes    = 64 << 10
	MaxBodyBytes             = 64 << 10
	MaxInputBytes            = 4 << 10
	MaxReadBytes             = 1 << 20
	DefaultMaxEventsPerRead  = 256
	CeilingMaxEventsPerRead  = 1024
	DefaultShutdownTimeout   = 5 * time.Second
)

// Limits bound the server. Zero fields select the defaults; values above a
// ceiling (or negative) are refused by New.
type Limits struct {
	// MaxInFlight caps concurrent requests of any kind (429 queue-full).
	MaxInFlight int
	// MaxLongPolls caps concurrent long-lived streams (followed events, attaches,
	// output follows, view streams; default 64, at most MaxInFlight; 429 queue-full). Session reader-task permits
	// (reader-cap-reached) apply on top.
	MaxLongPolls int
	// StreamOperatorReserve and StreamPerIdentity divide the MaxLongPolls stream slots
	// (long-polls, follows, attaches, view streams) between identity classes
	// (internal/platform/fairshare, shares.go): the reserve only operators take (default
	// a quarter), the most one other identity — an agent, a viewer, a view grantee —
	// holds (default half of the rest). Refusals: 429 share-cap-reached.
	StreamOperatorReserve int
	StreamPerIdentity     int
	// MaxWait caps waitSeconds of an event long-poll (default and ceiling
	// 30 s); larger requests are lowered to it.
	MaxWait time.Duration
	// RequestTimeout bounds each TokenReview and SubjectAccessReview call;
	// MaxWait + 3*RequestTimeout bounds writing a response (default 10 s,
	// ceiling 1 min).
	RequestTimeout time.Duration
	// ReadHeaderTimeout, ReadTimeout and IdleTimeout configure http.Server
	// (defaults 5 s, 10 s, 90 s; ceiling 1 min, 1 min, 10 min).
	ReadHeaderTimeout time.Duration
	ReadTimeout       time.Duration
	IdleTimeout       time.Duration
	// MaxHeaderBytes caps request headers (default 16 KiB, ceiling 64 KiB).
	MaxHeaderBytes int
	// MaxBodyBytes caps request bodies (default and ceiling 64 KiB, 413).
	MaxBodyBytes int64
	// MaxInputBytes caps decoded raw input per request (default and ceiling
	// 4 KiB, 413 input-too-large).
	MaxInputBytes int
	// MaxReadBytes caps one file read (default and ceiling 1 MiB; larger
	// requests are refused with read-cap-above-max).
	MaxReadBytes int
	// MaxEventsPerRead caps events per response (default 256, ceiling 1024;
	// larger max values are lowered to it).
	MaxEventsPerRead int
	// Snapshot bounds file snapshots (zero fields: fsaccess defaults).
	Snapshot fsaccess.SnapshotLimits
	// ShutdownTimeout bounds graceful shutdown before connections are
	// closed (default 5 s, ceiling 1 min).
	ShutdownTimeout time.Duration
}

func (l Limits) withDefaults() (Limits, error) {
	type intLimit struct {
		name     string
		v        *int
		def, max int
	}
	for _, c := range []intLimit{
		{"MaxInFlight", &l.MaxInFlight, DefaultMaxInFlight, CeilingMaxInFlight},
		{"MaxHeaderBytes", &l.MaxHeaderBytes, DefaultMaxHeaderBytes, CeilingMaxHeaderBytes},
		{"MaxInputBytes", &l.MaxInputBytes, MaxInputBytes, MaxInputBytes},
		{"MaxReadBytes", &l.MaxReadBytes, MaxReadBytes, MaxReadBytes},
		{"MaxEventsPerRead", &l.MaxEventsPerRead, DefaultMaxEventsPerRead, CeilingMaxEventsPerRead},
	} {
		if err := defInt(c.name, c.v, c.def, c.max); err != nil {
			return l, err
		}
	}
	if err := defInt("MaxLongPolls", &l.MaxLongPolls, min(DefaultMaxLongPolls, l.MaxInFlight), l.MaxInFlight); err != nil {
		return l, err
	}
	body := int(l.MaxBodyBytes)
	if err := defInt("MaxBodyBytes", &body, MaxBodyBytes, MaxBodyBytes); err != nil {
		return l, err
	}
	l.MaxBodyBytes = int64(body)
	type durLimit struct {
		name     string
		v        *time.Duration
		def, max time.Duration
	}
	for _, c := range []durLimit{
		{"MaxWait", &l.MaxWait, MaxWait, MaxWait},
		{"RequestTimeout", &l.RequestTimeout, DefaultRequestTimeout, CeilingRequestTimeout},
		{"ReadHeaderTimeout", &l.ReadHeaderTimeout, DefaultReadHeaderTimeout, time.Minute},
		{"ReadTimeout", &l.ReadTimeout, DefaultReadTimeout, time.Minute},
		{"IdleTimeout", &l.IdleTimeout, DefaultIdleTimeout, 10 * time.Minute},
		{"ShutdownTimeout", &l.ShutdownTimeout, DefaultShutdownTimeout, time.Minute},
	} {
		switch {
		case *c.v == 0:
			*c.v = c.def
		case *c.v < 0 || *c.v > c.max:
			return l, fmt.Errorf("limit %s=%s outside 0..%s", c.name, *c.v, c.max)
		}
	}
	return l, nil
}

func defInt(name string, v *int, def, max int) error {
	switch {
	case *v == 0:
		*v = def
	case *v < 0 || *v > max:
		return fmt.Errorf("limit %s=%d outside 0..%d", name, *v, max)
	}
	return nil
}

// Config configures a Server.
type Config struct {
	// Addr is the listen address of Serve (e.g. ":10350").
	Addr string
	// TLS is the serving configuration (Certificates or GetCertificate must
	// be set); alternatively CertFile and KeyFile name a PEM key pair.
	// TLS 1.2 is the minimum.
	TLS               *tls.Config
	CertFile, KeyFile string

	Authenticator Authenticator
	Authorizer    Authorizer
	Resolver      Resolver
	// Commands resolves TerminalCommands for the v2 output and cancel routes (optional:
	// nil answers them with not-found).
	Commands CommandResolver
	// Artifacts opens artifact blobs for the v2 download route (optional).
	Artifacts ArtifactResolver
	// Views resolves TerminalViews and their grants for the view stream (optional: nil
	// answers it with not-found).
	Views ViewResolver
	// ViewAuthorizer authorizes view streams; it must not cache (a membership removal
	// closes streams within views.RBACRecheckInterval). Nil: Authorizer.
	ViewAuthorizer Authorizer
	// Forwarding names the client certificates (the aggregated API server's) allowed to
	// forward an end user's identity; zero disables forwarding.
	Forwarding Forwarding
	Limits     Limits
}

// Server is the data plane. It is an http.Handler; Serve and ServeListener
// run it over TLS.
type Server struct {
	addr  string
	tls   *tls.Config
	authn Authenticator
	authz Authorizer
	res   Resolver
	cmds  CommandResolver
	arts  ArtifactResolver
	views ViewResolver
	// viewAuthz authorizes view streams without a cache.
	viewAuthz Authorizer
	fwd       Forwarding
	lim       Limits
	mux       *http.ServeMux

	inflight chan struct{}   // semaphore: requests in flight
	streams  *fairshare.Pool // long-lived stream slots, shared out by identity class (shares.go)

	// waitHook, when set (tests), runs right before a followed event stream parks.
	waitHook func()
}

// New validates cfg and builds a Server.
func New(cfg Config) (*Server, error) {
	switch {
	case cfg.Authenticator == nil:
		return nil, errors.New("data plane: Authenticator is required")
	case cfg.Authorizer == nil:
		return nil, errors.New("data plane: Authorizer is required")
	case cfg.Resolver == nil:
		return nil, errors.New("data plane: Resolver is required")
	}
	lim, err := cfg.Limits.withDefaults()
	if err != nil {
		return nil, fmt.Errorf("data plane: %w", err)
	}
	var tc *tls.Config
	switch {
	case cfg.TLS != nil:
		tc = cfg.TLS.Clone()
	case cfg.CertFile != "" && cfg.KeyFile != "":
		kp, err := tls.LoadX509KeyPair(cfg.CertFile, cfg.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("data plane: loading key pair %s: %w", cfg.CertFile, err)
		}
		tc = &tls.Config{Certificates: []tls.Certificate{kp}}
	default:
		return nil, errors.New("data plane: TLS or CertFile and KeyFile are required")
	}
	if len(tc.Certificates) == 0 && tc.GetCertificate == nil && tc.GetConfigForClient == nil {
		return nil, errors.New("data plane: the TLS config has no certificate")
	}
	if tc.MinVersion < tls.VersionTLS12 {
		tc.MinVersion = tls.VersionTLS12
	}
	cfg.Forwarding.applyTLS(tc)
	s := &Server{
		addr:      cfg.Addr,
		tls:       tc,
		authn:     cfg.Authenticator,
		authz:     cfg.Authorizer,
		res:       cfg.Resolver,
		cmds:      cfg.Commands,
		arts:      cfg.Artifacts,
		views:     cfg.Views,
		viewAuthz: cmp.Or[Authorizer](cfg.ViewAuthorizer, cfg.Authorizer),
		fwd:       cfg.Forwarding,
		lim:       lim,
		inflight:  make(chan struct{}, lim.MaxInFlight),
	}
	if s.streams, err = fairshare.New("stream", lim.streamShares()); err != nil {
		return nil, fmt.Errorf("data plane: stream shares: %w", err)
	}
	s.mux = s.routes()
	return s, nil
}

// Limits returns the effective limits.
func (s *Server) Limits() Limits { return s.lim }

// Serve listens on Config.Addr and serves until ctx ends.
func (s *Server) Serve(ctx context.Context) error {
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", s.addr)
	if err != nil {
		return fmt.Errorf("data plane: listening on %s: %w", s.addr, err)
	}
	return s.ServeListener(ctx, ln)
}

// ServeListener serves TLS on ln (a plain listener; the server terminates
// TLS) until ctx ends, then shuts down gracefully within
// Limits.ShutdownTimeout. Request contexts derive from ctx, so parked
// long-polls return as soon as ctx ends. It closes ln.
func (s *Server) ServeListener(ctx context.Context, ln net.Listener) error {
	logger := ctrl.LoggerFrom(ctx).WithName("dataplane")
	ctx = ctrl.LoggerInto(ctx, logger)
	srv := &http.Server{
		Handler:           s,
		TLSConfig:         s.tls.Clone(),
		ReadHeaderTimeout: s.lim.ReadHeaderTimeout,
		ReadTimeout:       s.lim.ReadTimeout,
		// Authentication, authorization and the handler's own work are each
		// bounded by RequestTimeout; a long-poll adds at most MaxWait.
		WriteTimeout:   s.lim.MaxWait + 3*s.lim.RequestTimeout,
		IdleTimeout:    s.lim.IdleTimeout,
		MaxHeaderBytes: s.lim.MaxHeaderBytes,
		BaseContext:    func(net.Listener) context.Context { return ctx },
		ErrorLog: log.New(logWriter(func(msg string) {
			logger.V(1).Info("HTTP server error", "message", msg)
		}), "", 0),
	}
	logger.Info("Serving data plane", "address", ln.Addr().String())
	errc := make(chan error, 1)
	go func() { errc <- srv.ServeTLS(ln, "", "") }()
	select {
	case err := <-errc:
		return fmt.Errorf("data plane: serving on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
	}
	logger.Info("Stopping data plane", "address", ln.Addr().String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.lim.ShutdownTimeout)
	defer cancel()
	shutErr := srv.Shutdown(sctx)
	if shutErr != nil {
		_ = srv.Close()
	}
	if err := <-errc; err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("data plane: serving on %s: %w", ln.Addr(), err)
	}
	if shutErr != nil {
		return fmt.Errorf("data plane: shutting down %s: %w", ln.Addr(), shutErr)
	}
	return nil
}

type logWriter func(string)

func (f logWriter) Write(p []byte) (int, error) {
	f(strings.TrimSuffix(string(p), "\n"))
	return len(p), nil
}

type userKey struct{}

func userFrom(ctx context.Context) *authenticationv1.UserInfo {
	u, _ := ctx.Value(userKey{}).(*authenticationv1.UserInfo)
	return u
}

// ServeHTTP admits the request (in-flight cap), authenticates its bearer
// token and dispatches it. Authentication precedes routing, so an
// unauthenticated caller learns nothing about routes or objects.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	select {
	case s.inflight <- struct{}{}:
		defer func() { <-s.inflight }()
	default:
		writeError(w, r, errorf(http.StatusTooManyRequests, string(actuation.CodeQueueFull),
			fmt.Sprintf("all %d request slots are in use", s.lim.MaxInFlight)))
		return
	}
	if hasIdentityHeaders(r) {
		cn, trusted := s.fwd.trustedForwarder(r)
		if !trusted {
			ctrl.LoggerFrom(r.Context()).V(1).Info("Refusing forwarded identity from an untrusted peer", "path", r.URL.Path, "peer", cn)
			writeError(w, r, errorf(http.StatusUnauthorized, string(actuation.CodeForwardingRefused),
				"identity headers are accepted only from the aggregated API server's client certificate"))
			return
		}
		u, err := forwardedUser(r)
		if err != nil {
			writeError(w, r, errorf(http.StatusBadRequest, string(actuation.CodeBadRequest), err.Error()))
			return
		}
		s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
		return
	}
	token, ok := bearerToken(r)
	if !ok {
		writeError(w, r, errorf(http.StatusUnauthorized, string(actuation.CodeUnauthenticated), "a bearer token is required"))
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), s.lim.RequestTimeout)
	u, err := s.authn.AuthenticateToken(ctx, token)
	cancel()
	switch {
	case errors.Is(err, ErrUnauthenticated):
		ctrl.LoggerFrom(r.Context()).V(1).Info("Rejecting unauthenticated request", "path", r.URL.Path, "reason", err.Error())
		writeError(w, r, errorf(http.StatusUnauthorized, string(actuation.CodeUnauthenticated), "the bearer token was not authenticated"))
		return
	case err != nil:
		writeError(w, r, &httpError{status: http.StatusServiceUnavailable, code: string(actuation.CodeUnavailable),
			message: "authentication is unavailable", cause: err})
		return
	case u == nil || u.Username == "":
		writeError(w, r, errorf(http.StatusUnauthorized, string(actuation.CodeUnauthenticated), "the token has no user name"))
		return
	}
	s.mux.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), userKey{}, u)))
}

// bearerToken extracts "Authorization: Bearer <token>" (scheme
// case-insensitive, exactly one header).
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Values("Authorization")
	if len(h) != 1 {
		return "", false
	}
	scheme, token, ok := strings.Cut(h[0], " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}
