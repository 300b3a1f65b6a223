package dataplane

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"time"

	ctrl "sigs.k8s.io/controller-runtime"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/dataplane/protocol/v2"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/views"
)

// Shared read-only terminal views (seed 003, docs/shared-views.md):
//
//	GET /v2/namespaces/{ns}/terminalviews/{name}/stream   get terminalviews/stream (subresources group)
//
// The stream delivers the latest visible screen of the view's session as JSON Lines: a
// "frame" only when the screen's digest changed (coalesced, at most one per
// minFrameInterval), a "heartbeat" carrying the current digest when nothing changed for the
// view's freshness bound, and a final "closed" line with the refusal code when delivery
// stops. It never carries events, input, resize or signal, and has no cursor: a reconnect
// starts with the current screen.
//
// Two independent authorities admit every frame: RBAC get on terminalviews/stream in the
// namespace (SubjectAccessReview, never cached, re-asked at least every
// views.RBACRecheckInterval and before any frame once older) and an active ViewGrant naming
// the observer (the node's watch cache, re-read before every frame and on every change
// of a grant, view or environment, so a revocation closes the stream as soon as the watch
// delivers it).

// ViewResolver finds TerminalViews bound to this node and their grants.
type ViewResolver interface {
	// View resolves the view; ErrNotFound when it is not bound to this node.
	View(ns, name string) (ViewInfo, error)
	// Grants lists the ViewGrants of the view: from the node's watch cache, or, when fresh,
	// from the API server itself (a stream opened right after its grant was created must
	// not be refused because the cache has not seen the grant yet).
	Grants(ns, view string, fresh bool) ([]views.Grant, error)
	// Changes returns a channel that receives after any change of a TerminalView, ViewGrant
	// or Environment on this node, and a function ending the subscription.
	Changes() (<-chan struct{}, func())
}

// ViewInfo is a view as the stream needs it.
type ViewInfo struct {
	UID string
	// Refusal is set while the view does not publish (superseded, above its ceiling, its
	// session not open here); Message explains it.
	Refusal actuation.Code
	Message string
	// SessionUID and Terminal are the published session (nil with a Refusal).
	SessionUID string
	Terminal   Terminal
	// Context and Generation are the bound operational context and environment generation.
	Context    string
	Generation int64
	// Bounds of the publication.
	Freshness   time.Duration
	MinInterval time.Duration
	MaxBytes    int
}

// ViewFrame is one line of a view stream.
type ViewFrame struct {
	// Type is frame, heartbeat or closed.
	Type string    `json:"type"`
	Seq  uint64    `json:"seq,omitempty"`
	Time time.Time `json:"time"`
	// Digest is the screen's digest (frame, heartbeat).
	Digest    string   `json:"digest,omitempty"`
	Rows      int      `json:"rows,omitempty"`
	Cols      int      `json:"cols,omitempty"`
	Lines     []string `json:"lines,omitempty"`
	Cursor    *Cursor  `json:"cursor,omitempty"`
	Truncated bool     `json:"truncated,omitempty"`
	// OperationalContext and EnvironmentGeneration are the view's binding.
	OperationalContext    string `json:"operationalContext,omitempty"`
	EnvironmentGeneration int64  `json:"environmentGeneration,omitempty"`
	// Grant names the ViewGrant that admitted the frame.
	Grant string `json:"grant,omitempty"`
	// Code and Message end the stream (closed).
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
}

// viewStatus is the HTTP status of a view refusal before the stream starts.
func viewStatus(c actuation.Code) int {
	switch c {
	case actuation.CodeViewContextSuperseded:
		return http.StatusConflict
	case actuation.CodeViewSessionUnavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusForbidden
}

func viewRefusal(c actuation.Code, msg string) error {
	return errorf(viewStatus(c), string(c), msg)
}

// viewAuthorize asks, without any cache, whether the user may get terminalviews/stream.
func (s *Server) viewAuthorize(ctx context.Context, r *http.Request, ref objRef) error {
	u := userFrom(r.Context())
	a := Attributes{Group: protocol.SubresourceGroup, Verb: "get", Namespace: ref.ns, Resource: "terminalviews", Subresource: "stream", Name: ref.name}
	actx, cancel := context.WithTimeout(ctx, s.lim.RequestTimeout)
	d, err := s.viewAuthz.Authorize(actx, u, a)
	cancel()
	if err != nil {
		return &httpError{status: http.StatusServiceUnavailable, code: string(actuation.CodeUnavailable), message: "authorization is unavailable", cause: err}
	}
	if !d.Allowed {
		return viewRefusal(actuation.CodeViewMembershipInactive,
			fmt.Sprintf("user %q may not get terminalviews/stream %q in namespace %q", u.Username, ref.name, ref.ns))
	}
	return nil
}

// viewDecide checks the view and the observer's grant now. fresh reads the grants from the
// API server (once, when a stream opens); re-checks on change events read the cache the
// event came from.
func (s *Server) viewDecide(r *http.Request, ref objRef, fresh bool) (ViewInfo, views.Grant, error) {
	info, err := s.views.View(ref.ns, ref.name)
	if err != nil {
		return info, views.Grant{}, fmt.Errorf("resolving terminal view %s: %w", ref, err)
	}
	if info.Refusal != "" {
		return info, views.Grant{}, viewRefusal(info.Refusal, info.Message)
	}
	grants, err := s.views.Grants(ref.ns, ref.name, fresh)
	if err != nil {
		return info, views.Grant{}, fmt.Errorf("listing grants of terminal view %s: %w", ref, err)
	}
	u := userFrom(r.Context())
	g, code := views.Decide(grants, info.UID, views.Identity{User: u.Username, Groups: u.Groups}, time.Now())
	switch code {
	case "":
	case actuation.CodeViewGrantRevoked:
		return info, g, viewRefusal(code, fmt.Sprintf("the grant of terminal view %s naming user %q was revoked", ref, u.Username))
	case actuation.CodeViewGrantExpired:
		return info, g, viewRefusal(code, fmt.Sprintf("the grant of terminal view %s naming user %q expired", ref, u.Username))
	default:
		return info, g, viewRefusal(code, fmt.Sprintf("no active grant of terminal view %s names user %q", ref, u.Username))
	}
	return info, g, nil
}

// viewStream serves GET .../terminalviews/{name}/stream.
func (s *Server) viewStream(w http.ResponseWriter, r *http.Request, ref objRef) error {
	if s.views == nil {
		return fmt.Errorf("terminal view %s: %w", ref, ErrNotFound)
	}
	ctx := r.Context()
	if err := s.viewAuthorize(ctx, r, ref); err != nil {
		return err
	}
	lastSAR := time.Now()
	info, grant, err := s.viewDecide(r, ref, true)
	if err != nil {
		return err
	}
	release, err := s.acquireStream(r.Context(), ref.ns, true)
	if err != nil {
		return err
	}
	defer release()
	changes, unsubscribe := s.views.Changes()
	defer unsubscribe()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	screen := make(chan struct{}, 1)
	watch := func(rg *ring.Ring) {
		cursor := rg.LastSeq()
		for {
			err := rg.Wait(ctx, cursor)
			select {
			case screen <- struct{}{}:
			default:
			}
			if err != nil {
				return
			}
			cursor = rg.LastSeq()
		}
	}
	go watch(info.Terminal.Events())

	rc := streamingResponse(w)
	h := w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	w.WriteHeader(http.StatusOK)
	enc := json.NewEncoder(w)
	logger := ctrl.LoggerFrom(ctx).WithValues("view", ref.String(), "user", userFrom(r.Context()).Username)
	write := func(f ViewFrame) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(StreamWriteTimeout))
		return enc.Encode(f) == nil && rc.Flush() == nil
	}
	closeWith := func(err error) error {
		_, body, _ := classify(err)
		logger.V(1).Info("Closing view stream", "code", body.Code)
		write(ViewFrame{Type: "closed", Time: time.Now().UTC(), Code: body.Code, Message: body.Message})
		return nil
	}

	var (
		seq        uint64
		lastDigest string
		lastSent   time.Time
		dirty      = true
		tick       = time.NewTicker(views.RBACRecheckInterval)
		timer      = time.NewTimer(0)
	)
	defer tick.Stop()
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changes:
		case <-screen:
			dirty = true
		case <-tick.C:
		case <-timer.C:
		}
		// Both authorities, before anything is written.
		now := time.Now()
		var next ViewInfo
		next, grant, err = s.viewDecide(r, ref, false)
		if err != nil {
			return closeWith(err)
		}
		if next.SessionUID != info.SessionUID {
			return closeWith(viewRefusal(actuation.CodeViewSessionUnavailable, "the view now publishes another session; reconnect"))
		}
		info = next
		if now.Sub(lastSAR) >= views.RBACRecheckInterval {
			if err := s.viewAuthorize(ctx, r, ref); err != nil {
				return closeWith(err)
			}
			lastSAR = now
		}
		if dirty {
			if wait := info.MinInterval - now.Sub(lastSent); !lastSent.IsZero() && wait > 0 {
				timer.Reset(wait) // coalesce: the latest screen goes out when the interval ends
				continue
			}
			dirty = false
			snap := info.Terminal.Screen()
			digest := "sha256:" + snap.Digest
			if digest != lastDigest {
				lines, truncated := views.BoundLines(snap.Lines, info.MaxBytes)
				seq++
				if !write(ViewFrame{Type: "frame", Seq: seq, Time: now.UTC(), Digest: digest, Rows: snap.Rows, Cols: snap.Cols,
					Lines: lines, Truncated: truncated, Cursor: &Cursor{Row: snap.CursorRow, Col: snap.CursorCol, Hidden: snap.CursorHidden},
					OperationalContext: info.Context, EnvironmentGeneration: info.Generation, Grant: grant.Name}) {
					return nil
				}
				lastDigest, lastSent = digest, now
				timer.Reset(info.Freshness)
				continue
			}
		}
		if now.Sub(lastSent) >= info.Freshness {
			if !write(ViewFrame{Type: "heartbeat", Seq: seq, Time: now.UTC(), Digest: lastDigest,
				OperationalContext: info.Context, EnvironmentGeneration: info.Generation, Grant: grant.Name}) {
				return nil
			}
			lastSent = now
			timer.Reset(info.Freshness)
		}
	}
}
