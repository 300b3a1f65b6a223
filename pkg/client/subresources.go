package client

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// Caps on what this client reads from the aggregated API into memory.
const (
	// MaxEventLineBytes bounds one JSON line of an events stream.
	MaxEventLineBytes = 1 << 20
	// MaxJSONResponseBytes bounds a screen or snapshot response.
	MaxJSONResponseBytes = 8 << 20
)

// Screen is terminalsessions/screen.
type Screen struct {
	Rows   int      `json:"rows"`
	Cols   int      `json:"cols"`
	Lines  []string `json:"lines"`
	Cursor struct {
		Row int `json:"row"`
		Col int `json:"col"`
	} `json:"cursor"`
	Seq    int64  `json:"seq"`
	Digest string `json:"digest"`
}

// Event is one line of terminalsessions/events. Raw keeps the line as served (with its
// type-specific fields) for -o json.
type Event struct {
	Seq        int64           `json:"seq"`
	Time       string          `json:"time,omitempty"`
	Type       string          `json:"type"`
	Text       string          `json:"text,omitempty"`
	DataBase64 string          `json:"dataBase64,omitempty"`
	From       int64           `json:"from,omitempty"`
	To         int64           `json:"to,omitempty"`
	Raw        json.RawMessage `json:"-"`
}

func (c *Client) getJSON(ctx context.Context, object string, v any, path string, params url.Values) error {
	req := c.Sub.Get().AbsPath(path)
	for k, vs := range params {
		for _, val := range vs {
			req = req.Param(k, val)
		}
	}
	rc, err := req.Stream(ctx)
	if err != nil {
		return c.wrapSub(ctx, object, err)
	}
	defer func() { _ = rc.Close() }()
	dec := json.NewDecoder(io.LimitReader(rc, MaxJSONResponseBytes))
	if err := dec.Decode(v); err != nil {
		return fmt.Errorf("decoding %s: %w", object, err)
	}
	return nil
}

// Screen reads the viewport of session name.
func (c *Client) Screen(ctx context.Context, name string) (*Screen, error) {
	var s Screen
	err := c.getJSON(ctx, "terminalsession "+name+" screen", &s, c.basePath()+"/terminalsessions/"+name+"/screen", nil)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// EventsOptions select events: after Since (exclusive), at most Limit, following new ones.
type EventsOptions struct {
	Since  int64
	Limit  int
	Follow bool
}

// Events streams the events of session name to fn, one per JSON line, until the stream
// ends (with Follow: until the session has ended), fn returns an error, or ctx ends. A
// follow through kube-apiserver ends at its request timeout; it is resumed after the last
// sequence number seen.
func (c *Client) Events(ctx context.Context, name string, o EventsOptions, fn func(Event) error) error {
	since, sent := o.Since, 0
	for {
		n, last, err := c.eventsOnce(ctx, name, EventsOptions{Since: since, Limit: o.Limit - sent, Follow: o.Follow}, fn)
		sent += n
		if err != nil || !o.Follow || ctx.Err() != nil || (o.Limit > 0 && sent >= o.Limit) {
			return err
		}
		since = max(since, last)
		var s wbv1.TerminalSession
		if err := c.Kube.Get(ctx, objectKey(c.Namespace, name), &s); err != nil {
			return Wrap("terminalsession "+name, err)
		}
		switch s.Status.Phase {
		case wbv1.SessionClosed, wbv1.SessionFailed, wbv1.SessionExpired, wbv1.SessionKilled:
			return nil
		}
	}
}

// eventsOnce is one events request; it returns how many events it passed on and the
// newest sequence number seen.
func (c *Client) eventsOnce(ctx context.Context, name string, o EventsOptions, fn func(Event) error) (int, int64, error) {
	rc := c.Sub
	if o.Follow {
		rc = c.stream
	}
	req := rc.Get().AbsPath(c.basePath(), "terminalsessions", name, "events")
	if o.Since > 0 {
		req = req.Param("since", strconv.FormatInt(o.Since, 10))
	}
	if o.Limit > 0 {
		req = req.Param("limit", strconv.Itoa(o.Limit))
	}
	if o.Follow {
		req = req.Param("follow", "true")
	}
	body, err := req.Stream(ctx)
	if err != nil {
		return 0, 0, c.wrapSub(ctx, "terminalsession "+name+" events", err)
	}
	defer func() { _ = body.Close() }()
	n, last := 0, int64(0)
	sc := bufio.NewScanner(body)
	sc.Buffer(make([]byte, 64<<10), MaxEventLineBytes)
	for sc.Scan() {
		line := sc.Bytes()
		if len(line) == 0 {
			continue
		}
		var ev Event
		if err := json.Unmarshal(line, &ev); err != nil {
			return n, last, fmt.Errorf("decoding an event of terminalsession %s: %w", name, err)
		}
		ev.Raw = append(json.RawMessage(nil), line...)
		last = max(last, ev.Seq, ev.To)
		n++
		if err := fn(ev); err != nil {
			return n, last, err
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil && !o.Follow {
		return n, last, fmt.Errorf("reading events of terminalsession %s: %w", name, err)
	}
	return n, last, nil
}

// AttachOptions steer Attach. Stdin nil attaches read-only (RBAC get suffices).
type AttachOptions struct {
	Stdin  io.Reader
	Stdout io.Writer
	TTY    bool
	Sizes  remotecommand.TerminalSizeQueue
}

// Attach joins session name over the remotecommand WebSocket protocol of kubectl exec.
func (c *Client) Attach(ctx context.Context, name string, o AttachOptions) error {
	u, err := url.Parse(c.Config.Host)
	if err != nil {
		return fmt.Errorf("parsing API server address %q: %w", c.Config.Host, err)
	}
	u.Path = c.basePath() + "/terminalsessions/" + name + "/attach"
	q := url.Values{"stdout": {"true"}, "stdin": {strconv.FormatBool(o.Stdin != nil)}, "tty": {strconv.FormatBool(o.TTY)}}
	u.RawQuery = q.Encode()
	exec, err := remotecommand.NewWebSocketExecutor(c.Config, http.MethodGet, u.String())
	if err != nil {
		return fmt.Errorf("attaching to terminalsession %s: %w", name, err)
	}
	err = exec.StreamWithContext(ctx, remotecommand.StreamOptions{Stdin: o.Stdin, Stdout: o.Stdout, Tty: o.TTY, TerminalSizeQueue: o.Sizes})
	return c.wrapSub(ctx, "terminalsession "+name+" attach", upgradeCause(err))
}

// FileEntry is one entry of a files snapshot.
type FileEntry struct {
	Path   string `json:"path"`
	Type   string `json:"type"`
	Mode   any    `json:"mode,omitempty"`
	Size   int64  `json:"size"`
	Digest string `json:"digest,omitempty"`
}

// FileSnapshot is environments/files?op=snapshot.
type FileSnapshot struct {
	Root        string      `json:"root"`
	Entries     []FileEntry `json:"entries"`
	Truncated   bool        `json:"truncated"`
	TruncatedBy []string    `json:"truncatedBy,omitempty"`
}

// FileRequest addresses a file or directory of an environment (ls, cat, and the MCP
// read_file and snapshot_files tools).
type FileRequest struct {
	Environment string `json:"environment" jsonschema:"Environment"`
	Root        string `json:"root" jsonschema:"root name"`
	Path        string `json:"path,omitempty" jsonschema:"path beneath the root (empty: the root)"`
	Offset      int64  `json:"offset,omitempty" jsonschema:"read: byte offset"`
	Limit       int64  `json:"limit,omitempty" jsonschema:"read: at most this many bytes"`
}

// Snapshot lists r.Path of r.Root with sizes and digests.
func (c *Client) Snapshot(ctx context.Context, r FileRequest) (*FileSnapshot, error) {
	var s FileSnapshot
	q := url.Values{"root": {r.Root}, "path": {r.Path}, "op": {"snapshot"}}
	err := c.getJSON(ctx, "environment "+r.Environment+" files", &s, c.basePath()+"/environments/"+r.Environment+"/files", q)
	if err != nil {
		return nil, err
	}
	return &s, nil
}

// FileContent is a bounded read of one file.
type FileContent struct {
	Path      string `json:"path"`
	Digest    string `json:"digest,omitempty"`
	Size      int64  `json:"size"`
	Truncated bool   `json:"truncated"`
	Data      []byte `json:"-"`
}

// ReadFile reads a bounded window of one file.
func (c *Client) ReadFile(ctx context.Context, r FileRequest) (*FileContent, error) {
	req := c.Sub.Get().AbsPath(c.basePath(), "environments", r.Environment, "files").
		Param("root", r.Root).Param("path", r.Path).Param("op", "read")
	if r.Offset > 0 {
		req = req.Param("offset", strconv.FormatInt(r.Offset, 10))
	}
	if r.Limit > 0 {
		req = req.Param("limit", strconv.FormatInt(r.Limit, 10))
	}
	resp, err := c.rawDo(ctx, req)
	if err != nil {
		return nil, c.wrapSub(ctx, "environment "+r.Environment+" file "+r.Root+"/"+r.Path, err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxJSONResponseBytes))
	if err != nil {
		return nil, fmt.Errorf("reading file %s/%s of environment %s: %w", r.Root, r.Path, r.Environment, err)
	}
	fc := &FileContent{Path: r.Path, Data: body, Digest: resp.Header.Get("X-Workbench-Digest")}
	fc.Size, _ = strconv.ParseInt(resp.Header.Get("X-Workbench-Size"), 10, 64)
	fc.Truncated, _ = strconv.ParseBool(resp.Header.Get("X-Workbench-Truncated"))
	return fc, nil
}

// rawDo sends req through the REST client's transport and returns the response when it
// is 2xx (headers intact); otherwise the served metav1.Status as an API error.
func (c *Client) rawDo(ctx context.Context, req *rest.Request) (*http.Response, error) {
	rc, ok := c.Sub.(*rest.RESTClient)
	if !ok {
		return nil, fmt.Errorf("raw request needs a *rest.RESTClient")
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, req.URL().String(), nil)
	if err != nil {
		return nil, err
	}
	resp, err := rc.Client.Do(hreq)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode >= 200 && resp.StatusCode < 300 {
		return resp, nil
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 64<<10))
	var st metav1.Status
	if json.Unmarshal(body, &st) == nil && st.Kind == "Status" {
		if st.Code == 0 {
			st.Code = int32(resp.StatusCode)
		}
		return nil, &apierrors.StatusError{ErrStatus: st}
	}
	return nil, apierrors.NewGenericServerResponse(resp.StatusCode, http.MethodGet, SubresourcesGroupVersion.WithResource("").GroupResource(), "", string(body), 0, false)
}

// Export creates an export Artifact of root/path in environment env and waits until the
// node has captured it (digest and size recorded).
func (c *Client) Export(ctx context.Context, env, root, path string) (*wbv1.Artifact, error) {
	a := &wbv1.Artifact{ObjectMeta: metav1.ObjectMeta{GenerateName: env + "-export-", Namespace: c.Namespace},
		Spec: wbv1.ArtifactSpec{EnvironmentRef: wbv1.ObjectName(env), Source: "export", Root: ptr(wbv1.RootName(root))}}
	if path != "" {
		a.Spec.Path = ptr(wbv1.RelativePath(path))
	}
	return c.captureExport(ctx, env, a)
}

// captureExport binds export Artifact a of environment env to its node, creates it and
// waits until the node has captured it (digest recorded) or refused it.
func (c *Client) captureExport(ctx context.Context, env string, a *wbv1.Artifact) (*wbv1.Artifact, error) {
	if err := c.bindToNode(ctx, env, &a.ObjectMeta); err != nil {
		return nil, err
	}
	if err := c.Kube.Create(ctx, a); err != nil {
		return nil, Wrap("artifact export of "+env, err)
	}
	err := waitFor(ctx, c, a, &wbv1.ArtifactList{}, func(a *wbv1.Artifact) (bool, error) {
		if a.Status.Refusal != nil {
			return false, refused("artifact "+a.Name, a.Status.Refusal.Code, a.Status.Refusal.Message)
		}
		return a.Status.Digest != "", nil
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Download copies the blob of artifact name into w and checks it against the digest the
// server announced (X-Workbench-Digest) and the Artifact's recorded digest.
func (c *Client) Download(ctx context.Context, name string, w io.Writer) (digest string, size int64, err error) {
	var a wbv1.Artifact
	if err := c.Kube.Get(ctx, objectKey(c.Namespace, name), &a); err != nil {
		return "", 0, Wrap("artifact "+name, err)
	}
	body, err := c.stream.Get().AbsPath(c.basePath(), "artifacts", name, "download").Stream(ctx)
	if err != nil {
		return "", 0, c.wrapSub(ctx, "artifact "+name+" download", err)
	}
	defer func() { _ = body.Close() }()
	h := sha256.New()
	n, err := io.Copy(io.MultiWriter(w, h), body)
	if err != nil {
		return "", n, fmt.Errorf("downloading artifact %s: %w", name, err)
	}
	got := "sha256:" + hex.EncodeToString(h.Sum(nil))
	if a.Status.Digest != "" && string(a.Status.Digest) != got {
		return got, n, refused("artifact "+name, "digest-mismatch", fmt.Sprintf("downloaded %d bytes with digest %s; the artifact records %s", n, got, a.Status.Digest))
	}
	return got, n, nil
}

// Upload creates an upload Artifact named name (empty: generated) for environment env and
// streams r as its blob (artifacts/upload). A file larger than MaxUploadBytes is refused
// before anything is created; a refused or failed upload deletes the Artifact it created.
func (c *Client) Upload(ctx context.Context, env, name string, r io.Reader) (*wbv1.Artifact, error) {
	if f, ok := r.(interface{ Stat() (os.FileInfo, error) }); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() && fi.Size() > MaxUploadBytes {
			return nil, &Error{Class: ClassCapReached, Code: "upload-too-large", Object: "artifact upload to " + env,
				Message: fmt.Sprintf("%d bytes; uploads are at most %d bytes", fi.Size(), MaxUploadBytes)}
		}
	}
	a := &wbv1.Artifact{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace},
		Spec: wbv1.ArtifactSpec{EnvironmentRef: wbv1.ObjectName(env), Source: "upload"}}
	if name == "" {
		a.GenerateName = env + "-upload-"
	}
	if err := c.bindToNode(ctx, env, &a.ObjectMeta); err != nil {
		return nil, err
	}
	if err := c.Kube.Create(ctx, a); err != nil {
		return nil, Wrap("artifact upload to "+env, err)
	}
	if err := c.UploadTo(ctx, a.Name, r); err != nil {
		// Best effort: the Artifact holds nothing and would only linger until deleted.
		_ = c.Kube.Delete(context.WithoutCancel(ctx), a)
		return nil, err
	}
	if err := c.Kube.Get(ctx, objectKey(c.Namespace, a.Name), a); err != nil {
		return nil, Wrap("artifact "+a.Name, err)
	}
	return a, nil
}

// UploadTo streams r as the blob of the existing Artifact name (spec.source upload).
func (c *Client) UploadTo(ctx context.Context, name string, r io.Reader) error {
	err := c.stream.Post().AbsPath(c.basePath(), "artifacts", name, "upload").
		SetHeader("Content-Type", "application/octet-stream").Body(io.LimitReader(r, MaxUploadBytes+1)).Do(ctx).Error()
	return c.wrapSub(ctx, "artifact "+name+" upload", err)
}

// GetArtifact reads Artifact name.
func (c *Client) GetArtifact(ctx context.Context, name string) (*wbv1.Artifact, error) {
	var a wbv1.Artifact
	if err := c.Kube.Get(ctx, objectKey(c.Namespace, name), &a); err != nil {
		return nil, Wrap("artifact "+name, err)
	}
	return &a, nil
}

// MaxUploadBytes is the node's cap on one upload (a larger body is refused with 413
// upload-too-large).
const MaxUploadBytes = 64 << 20

// bindToNode labels an Artifact with the node of environment env (the node agent that
// holds the blob watches only its own node's label; nothing places artifacts for it).
func (c *Client) bindToNode(ctx context.Context, env string, m *metav1.ObjectMeta) error {
	var e wbv1.Environment
	if err := c.Kube.Get(ctx, objectKey(c.Namespace, env), &e); err != nil {
		return Wrap("environment "+env, err)
	}
	if e.Status.NodeName == "" {
		return &Error{Class: ClassUnavailable, Code: "environment-unavailable", Object: "environment " + env, Message: "the environment is not placed on a node yet"}
	}
	if m.Labels == nil {
		m.Labels = map[string]string{}
	}
	m.Labels[wbv1.NodeLabel] = e.Status.NodeName
	m.Labels[wbv1.EnvironmentLabel] = env
	return nil
}
