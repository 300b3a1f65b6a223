package client

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// ViewFrame is one line of a terminalviews/{name}/stream: a latest-state screen ("frame"),
// a "heartbeat" with the current digest, or the final "closed" line with its code
// (docs/shared-views.md).
type ViewFrame struct {
	Type                  string    `json:"type"`
	Seq                   uint64    `json:"seq,omitempty"`
	Time                  time.Time `json:"time"`
	Digest                string    `json:"digest,omitempty"`
	Rows                  int       `json:"rows,omitempty"`
	Cols                  int       `json:"cols,omitempty"`
	Lines                 []string  `json:"lines,omitempty"`
	Truncated             bool      `json:"truncated,omitempty"`
	OperationalContext    string    `json:"operationalContext,omitempty"`
	EnvironmentGeneration int64     `json:"environmentGeneration,omitempty"`
	Grant                 string    `json:"grant,omitempty"`
	Code                  string    `json:"code,omitempty"`
	Message               string    `json:"message,omitempty"`
}

// MaxViewLineBytes bounds one line of a view stream (a frame is at most 64 KiB of screen).
const MaxViewLineBytes = 1 << 20

// ViewRequest describes a TerminalView to create.
type ViewRequest struct {
	Name, Session string
	// Ceiling is the classification ceiling (an operational context class).
	Ceiling          string
	FreshnessSeconds int32
}

// CreateView publishes session's visible screen as a TerminalView.
func (c *Client) CreateView(ctx context.Context, r ViewRequest) (*wbv1.TerminalView, error) {
	v := &wbv1.TerminalView{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: c.Namespace}, Spec: wbv1.TerminalViewSpec{
		SessionRef: wbv1.ObjectName(r.Session), ClassificationCeiling: wbv1.ContextClass(r.Ceiling)}}
	if r.FreshnessSeconds > 0 {
		v.Spec.FreshnessSeconds = ptr(r.FreshnessSeconds)
	}
	if err := c.Kube.Create(ctx, v); err != nil {
		return nil, Wrap("terminalview "+r.Name, err)
	}
	return v, nil
}

// GrantRequest describes a ViewGrant: exactly one subject (User, Group or ServiceAccount
// with its namespace) and a lifetime of at most 24 hours.
type GrantRequest struct {
	Name, View                             string
	SubjectKind, Subject, SubjectNamespace string
	TTL                                    time.Duration
	Reason                                 string
}

// GrantView admits one subject to a view (needs the virtual verb grant on terminalviews).
func (c *Client) GrantView(ctx context.Context, r GrantRequest) (*wbv1.ViewGrant, error) {
	g := &wbv1.ViewGrant{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: c.Namespace}, Spec: wbv1.ViewGrantSpec{
		ViewRef: wbv1.ObjectName(r.View), Reason: r.Reason, ExpiresAt: metav1.NewTime(time.Now().Add(r.TTL)),
		Subject: wbv1.ViewSubject{Kind: wbv1.ViewSubjectKind(r.SubjectKind), Name: r.Subject, Namespace: r.SubjectNamespace}}}
	if g.Name == "" {
		g.GenerateName = r.View + "-"
	}
	if err := c.Kube.Create(ctx, g); err != nil {
		return nil, Wrap("viewgrant of terminalview "+r.View, err)
	}
	return g, nil
}

// RevokeViewGrant revokes a grant; a revoked grant stays revoked.
func (c *Client) RevokeViewGrant(ctx context.Context, name string) (*wbv1.ViewGrant, error) {
	var g wbv1.ViewGrant
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := c.Kube.Get(ctx, objectKey(c.Namespace, name), &g); err != nil {
			return err
		}
		if g.Spec.Revoked != nil && *g.Spec.Revoked {
			return nil
		}
		g.Spec.Revoked = ptr(true)
		return c.Kube.Update(ctx, &g)
	})
	if err != nil {
		return nil, Wrap("viewgrant "+name, err)
	}
	return &g, nil
}

// WatchView follows a view's latest-state stream, calling fn for each frame and heartbeat.
// kube-apiserver ends a plain HTTP request at its --request-timeout (60 s by default) and a
// node agent restart drops the connection: the stream is cursor-free, so WatchView simply
// reconnects (the first frame of a connection is the current screen). It returns the
// refusal that ends delivery (view-grant-revoked, view-grant-expired,
// view-membership-inactive, view-context-superseded, ...) as an *Error, or nil when ctx ends.
func (c *Client) WatchView(ctx context.Context, name string, fn func(ViewFrame) error) error {
	object := "terminalview " + name
	for {
		err := c.watchViewOnce(ctx, name, fn)
		if ctx.Err() != nil {
			return nil
		}
		var e *Error
		switch {
		case err == nil: // cut without a closing line: reconnect
		case errors.As(err, &e) && e.Class != ClassUnavailable && e.Code != string(actuation.CodeViewSessionUnavailable):
			return err
		case apierrors.IsServiceUnavailable(err) || apierrors.IsInternalError(err) || errors.As(err, &e):
		default:
			return Wrap(object, err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func (c *Client) watchViewOnce(ctx context.Context, name string, fn func(ViewFrame) error) error {
	object := "terminalview " + name
	body, err := c.stream.Get().AbsPath(c.basePath(), "terminalviews", name, "stream").Stream(ctx)
	if err != nil {
		if se, ok := err.(apierrors.APIStatus); ok && se.Status().Code >= http.StatusInternalServerError {
			return Wrap(object, err)
		}
		return c.wrapSub(ctx, object, err)
	}
	defer func() { _ = body.Close() }()
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), MaxViewLineBytes)
	for sc.Scan() {
		var f ViewFrame
		if err := json.Unmarshal(sc.Bytes(), &f); err != nil {
			return fmt.Errorf("decoding a frame of %s: %w", object, err)
		}
		if f.Type == "closed" {
			return &Error{Code: f.Code, Class: ClassOf(f.Code), Message: f.Message, Object: object}
		}
		if err := fn(f); err != nil {
			return err
		}
	}
	return nil
}
