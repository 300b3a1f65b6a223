package agent

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/dataplane"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/nodeagent/runs"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/statusapply"
)

// structuredTerminal is the data-plane face of a session without a PTY program: its event
// ring records the output of its structured commands; there is no screen and no raw input.
type structuredTerminal struct{ rg *ring.Ring }

var errNoPTY = actuation.Refusef(actuation.CodeNoPTY, "this session runs no PTY program; use structured commands")

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
	if err := r.get("session", ns, name, &ts); err != nil {
		return nil, dataplane.SessionInfo{}, err
	}
	live := a.sess.Open(string(ts.UID))
	if live == nil {
		return nil, dataplane.SessionInfo{}, fmt.Errorf("session %s/%s is not open on this node: %w", ns, name, dataplane.ErrNotFound)
	}
	info := dataplane.SessionInfo{RawInput: ts.Spec.RawInput}
	if live.PTY != nil {
		return live.PTY, info, nil
	}
	return structuredTerminal{rg: live.Ring}, info, nil
}

func (r resolver) Root(ns, env, root string) (dataplane.Files, error) {
	a := r.a
	var e wbv1.Environment
	if err := r.get("environment", ns, env, &e); err != nil {
		return nil, err
	}
	roots, ok := a.mountedRoots(string(e.UID))
	if !ok {
		// Bound to this node (the node's cache holds nothing else) but with no pinned roots
		// here: not yet allocated, failed (a root changed under it), paused or torn down.
		// It exists, so this is unavailable (retryable), not not-found.
		return nil, actuation.Refusef(actuation.CodeEnvironmentUnavailable, "environment %s/%s is not ready on this node", ns, env)
	}
	for _, mr := range roots {
		if mr.Name == root {
			files, err := a.openRoot(&e, mr)
			if err != nil {
				return nil, err
			}
			return files, nil
		}
	}
	return nil, fmt.Errorf("root %s of environment %s/%s: %w", root, ns, env, dataplane.ErrNotFound)
}

// forwarding loads the aggregated API server's client CA: only a certificate it signed,
// with one of the configured names, may forward an end user's identity.
func (a *Agent) forwarding() (dataplane.Forwarding, error) {
	if a.cfg.DataPlaneForwardingCAFile == "" {
		return dataplane.Forwarding{}, nil
	}
	caPEM, err := os.ReadFile(a.cfg.DataPlaneForwardingCAFile)
	if err != nil {
		return dataplane.Forwarding{}, fmt.Errorf("reading the data plane forwarding CA %s: %w", a.cfg.DataPlaneForwardingCAFile, err)
	}
	return dataplane.LoadForwarding(caPEM, a.cfg.DataPlaneForwardingNames)
}

// startDataPlane serves the node's HTTPS data plane and publishes its address and CA.
func (a *Agent) startDataPlane(ctx context.Context) error {
	if a.cfg.DataPlaneAddress == "" {
		return nil
	}
	hosts := a.cfg.DataPlaneHosts
	if len(hosts) == 0 {
		hosts = []string{"127.0.0.1", "localhost"}
		if ip := os.Getenv("POD_IP"); ip != "" {
			// In a DaemonSet pod (downward API): the address the aggregated API server's
			// pods reach, published as the endpoint.
			hosts = append([]string{ip}, hosts...)
		}
	}
	cert, caPEM, err := dataplane.GenerateServingCert(hosts)
	if err != nil {
		return err
	}
	authn, err := dataplane.NewTokenReviewAuthenticator(a.client, dataplane.TokenReviewOptions{Audiences: []string{dataPlaneAudience}})
	if err != nil {
		return err
	}
	authz, err := dataplane.NewSubjectAccessReviewAuthorizer(a.client, dataplane.CacheOptions{})
	if err != nil {
		return err
	}
	// View streams re-ask SubjectAccessReview at least every views.RBACRecheckInterval:
	// never from a cache, so a removed RoleBinding stops delivery within it.
	viewAuthz, err := dataplane.NewSubjectAccessReviewAuthorizer(a.client, dataplane.CacheOptions{TTL: -1})
	if err != nil {
		return err
	}
	fwd, err := a.forwarding()
	if err != nil {
		return err
	}
	srv, err := dataplane.New(dataplane.Config{TLS: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		Authenticator: authn, Authorizer: authz, Resolver: resolver{a: a}, Commands: resolver{a: a}, Artifacts: resolver{a: a}, Views: resolver{a: a}, ViewAuthorizer: viewAuthz, Forwarding: fwd,
		Limits: dataplane.Limits{MaxLongPolls: a.cfg.DataPlaneStreams.Streams, StreamOperatorReserve: a.cfg.DataPlaneStreams.OperatorReserve, StreamPerIdentity: a.cfg.DataPlaneStreams.PerIdentity}})
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
	a.report.SetDataPlane(&wbv1.DataPlane{Endpoint: endpoint, CABundle: string(caPEM)})
	go func() {
		if err := srv.ServeListener(ctx, ln); err != nil {
			ctrl.LoggerFrom(ctx).Error(err, "Serving the data plane")
		}
	}()
	return nil
}

// dataPlaneAudience is the audience every token the data plane accepts must carry
// (TokenRequest audiences), so a node never receives a token it could replay against the
// API server.
const dataPlaneAudience = "workbench.sensorium.dev/dataplane"

// DataPlaneAudience returns the audience of data-plane tokens.
func DataPlaneAudience() string { return dataPlaneAudience }

// get reads ns/name from the node's cache into obj; a missing object is
// dataplane.ErrNotFound, named by what.
func (r resolver) get(what, ns, name string, obj client.Object) error {
	if err := r.a.client.Get(context.Background(), types.NamespacedName{Namespace: ns, Name: name}, obj); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return fmt.Errorf("%s %s/%s: %w", what, ns, name, dataplane.ErrNotFound)
		}
		return err
	}
	return nil
}

// Command implements dataplane.CommandResolver: a command of a session open on this node.
func (r resolver) Command(ns, name string) (dataplane.Command, error) {
	a := r.a
	var tc wbv1.TerminalCommand
	if err := r.get("command", ns, name, &tc); err != nil {
		return nil, err
	}
	uid := string(tc.UID)
	lc, _, _ := a.commands.Get(uid)
	if lc != nil && lc.Out != nil && lc.Finished != nil { // both set before the command is entered
		return liveCommandView{a: a, uid: uid, lc: lc}, nil
	}
	// Not started in this process: a recorded outcome whose output is still in its
	// session's ring.
	rec, ok, err := a.store.Commands().Get(uid)
	if err != nil {
		return nil, fmt.Errorf("command %s/%s: %w", ns, name, err)
	}
	o := (*commandOutcome)(nil)
	if ok {
		o = runs.Decode[commandOutcome](rec.Outcome)
	}
	if o == nil {
		// Not run here: not yet (output?follow waits), or never (it ended first).
		return nil, fmt.Errorf("command %s/%s: %w", ns, name, &dataplane.NotStartedError{
			Final: wbv1.CommandIsFinal(tc.Status.Conditions), Phase: string(wbv1.CommandPhaseFor(tc.Status.Conditions))})
	}
	var rg *ring.Ring
	if s, _ := a.sess.Get(rec.SessionUID); s != nil {
		rg = s.Ring
	}
	if rg == nil {
		return nil, fmt.Errorf("the session of command %s/%s is gone from this node: %w", ns, name, dataplane.ErrNotFound)
	}
	done := make(chan struct{})
	close(done)
	return finalCommandView{rg: rg, o: o, done: done}, nil
}

func resultOf(o *commandOutcome) dataplane.CommandResult {
	return dataplane.CommandResult{Phase: string(o.Phase), SeqTo: o.SeqTo, ExitCode: o.ExitCode, RefusalCode: o.RefusalCode, Message: o.Message}
}

type liveCommandView struct {
	a   *Agent
	uid string
	lc  *liveCommand
}

func (v liveCommandView) Ring() *ring.Ring      { return v.lc.Out }
func (v liveCommandView) SeqFrom() uint64       { return v.lc.SeqFrom }
func (v liveCommandView) Done() <-chan struct{} { return v.lc.Finished }
func (v liveCommandView) Result() dataplane.CommandResult {
	result := v.a.commands.ResultOf(v.lc) // the view outlives the table's entry
	if result == nil {
		return dataplane.CommandResult{}
	}
	return resultOf(result)
}
func (v liveCommandView) Cancel() error {
	switch {
	case v.lc.Handle != nil:
		v.lc.Handle.Kill(procexec.OriginCancel)
	case v.lc.Cancel != nil:
		v.lc.Cancel()
	}
	return nil
}

type finalCommandView struct {
	rg   *ring.Ring
	o    *commandOutcome
	done chan struct{}
}

func (v finalCommandView) Ring() *ring.Ring                { return v.rg }
func (v finalCommandView) SeqFrom() uint64                 { return v.o.SeqFrom }
func (v finalCommandView) Done() <-chan struct{}           { return v.done }
func (v finalCommandView) Result() dataplane.CommandResult { return resultOf(v.o) }
func (v finalCommandView) Cancel() error                   { return nil }

// OpenArtifact implements dataplane.ArtifactResolver: the verified blob of an Artifact bound
// to this node whose content is recorded.
func (r resolver) OpenArtifact(ns, name string) (io.ReadCloser, string, int64, error) {
	a := r.a
	var art wbv1.Artifact
	if err := r.get("artifact", ns, name, &art); err != nil {
		return nil, "", 0, err
	}
	if art.Status.Digest == "" || art.Status.NodeName != a.cfg.NodeName {
		return nil, "", 0, fmt.Errorf("artifact %s/%s holds no content on this node yet: %w", ns, name, dataplane.ErrNotFound)
	}
	b, err := a.blobs.Open(string(art.Status.Digest))
	if err != nil {
		return nil, "", 0, err
	}
	return b, b.Digest, b.Size, nil
}

// ArtifactClassification implements dataplane.ArtifactResolver: the Artifact's
// spec.classification, which decides who may download it (actuation.ArtifactDownloadVerb).
func (r resolver) ArtifactClassification(ns, name string) (string, error) {
	var art wbv1.Artifact
	if err := r.get("artifact", ns, name, &art); err != nil {
		return "", err
	}
	return string(art.Spec.Classification), nil
}

// UploadArtifact implements dataplane.ArtifactUploader: the body becomes the blob of an
// Artifact with spec.source upload bound to this node, once (content is immutable), and
// its digest, size and Ready condition are recorded as the artifact reconciler records a
// capture's. The Artifact is read from the API server, not the cache: clients create it
// and upload right away.
func (r resolver) UploadArtifact(ctx context.Context, ns, name string, body io.Reader, maxBytes int64) (string, int64, error) {
	a := r.a
	key := types.NamespacedName{Namespace: ns, Name: name}
	var art wbv1.Artifact
	if err := a.reader.Get(ctx, key, &art); err != nil {
		if client.IgnoreNotFound(err) == nil {
			return "", 0, fmt.Errorf("artifact %s: %w", key, dataplane.ErrNotFound)
		}
		return "", 0, fmt.Errorf("reading Artifact %s: %w", key, err)
	}
	switch {
	case art.Labels[wbv1.NodeLabel] != a.cfg.NodeName:
		return "", 0, fmt.Errorf("artifact %s is not bound to node %s: %w", key, a.cfg.NodeName, dataplane.ErrNotFound)
	case art.Spec.Source != artifactUpload:
		return "", 0, actuation.Refusef(actuation.CodeInvalidSpec, "artifact %s has spec.source %s; only an upload artifact takes content", key, art.Spec.Source)
	case art.Status.Digest != "" || art.Status.Refusal != nil:
		return "", 0, actuation.Refusef(actuation.CodeImmutable, "artifact %s already holds its content (%s)", key, art.Status.Digest)
	case !art.DeletionTimestamp.IsZero():
		return "", 0, fmt.Errorf("artifact %s is being deleted: %w", key, dataplane.ErrNotFound)
	}
	id := string(art.UID)
	a.mu.Lock()
	if a.uploads == nil {
		a.uploads = map[string]struct{}{}
	}
	_, busy := a.uploads[id]
	a.uploads[id] = struct{}{}
	a.mu.Unlock()
	if busy {
		return "", 0, actuation.Refusef(actuation.CodeImmutable, "artifact %s is being uploaded by another request", key)
	}
	defer func() {
		a.mu.Lock()
		delete(a.uploads, id)
		a.mu.Unlock()
	}()
	digest, size, err := a.blobs.Put(body, maxBytes)
	if err != nil {
		if actuation.CodeOf(err) == actuation.CodeArtifactTooLarge {
			return "", 0, actuation.Refusef(actuation.CodeUploadTooLarge, "artifact %s: the upload exceeds %d bytes", key, maxBytes)
		}
		return "", 0, fmt.Errorf("storing the upload of artifact %s: %w", key, err)
	}
	cur, next := artifactOwned(&art.Status), artifactOwned(&art.Status)
	retention := defaultRetention
	if art.Spec.RetentionSeconds > 0 {
		retention = time.Duration(art.Spec.RetentionSeconds) * time.Second
	}
	until := metav1.NewTime(art.CreationTimestamp.Add(retention))
	next.Digest, next.Size, next.RetainedUntil = wbv1.Digest(digest), size, &until
	next.NodeName, next.ObservedGeneration = a.cfg.NodeName, art.Generation
	statusapply.Set(&next.Conditions, &next.Conditions, statusapply.Cond(wbv1.ConditionReady, true, "Stored",
		fmt.Sprintf("%d bytes uploaded, held by node %s", size, a.cfg.NodeName), art.Generation))
	if _, err := statusapply.Apply(ctx, a.client, FieldManager+"artifact", &art, cur, next); err != nil {
		return "", 0, fmt.Errorf("recording the upload of artifact %s: %w", key, err)
	}
	a.recordEvent(&art, corev1.EventTypeNormal, "Stored", "Artifact uploaded as "+digest)
	return digest, size, nil
}

// CommandsChanged implements dataplane.CommandWatcher: the channel closes at the next
// change of a command on this node (one started, or a TerminalCommand reconciled).
func (r resolver) CommandsChanged() <-chan struct{} {
	return r.a.commands.Changed()
}

// SessionsChanged implements dataplane.SessionWatcher: the channel closes after the next
// reconcile of a TerminalSession on this node (its spec changed, it closed, it was deleted),
// so an open attach re-checks the session's raw-input mode at that event, not per keystroke.
func (r resolver) SessionsChanged() <-chan struct{} { return r.a.sessChanged.Changed() }
