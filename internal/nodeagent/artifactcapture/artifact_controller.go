// Package artifactcapture is the node agent's room for captured and exported Artifacts:
// it stores once, in the node's content-addressed store, the output a session's ring
// retains, a deterministic tar of an environment root's subtree, or the git-format patch
// of a root's changes, and records where the bytes are. Uploads come through the data
// plane; retention is the agent's sweep.
package artifactcapture

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/source"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/artifacts"
	"sensorium.dev/workbench/internal/nodeagent/gitexport"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/ring"
	"sensorium.dev/workbench/internal/platform/fixture"
	"sensorium.dev/workbench/internal/statusapply"
)

// Artifact bounds.
const (
	// maxArtifactBytes caps one captured or exported blob (artifact-too-large above it).
	maxArtifactBytes = 64 << 20
	// DefaultRetention applies when spec.retentionSeconds is unset.
	DefaultRetention = 24 * time.Hour
	// guestExportTimeout bounds an export from a VM guest (receipt and re-encoding).
	guestExportTimeout = 2 * time.Minute
	// artifactScopeGrace bounds how long an artifact waits for its environment or session
	// to become available in this process before it is refused.
	artifactScopeGrace = 2 * time.Minute
)

// Artifact sources.
const (
	artifactCapture wbv1.ArtifactSource = "capture"
	artifactExport  wbv1.ArtifactSource = "export"
	// SourceUpload is an Artifact whose bytes come through the data plane.
	SourceUpload wbv1.ArtifactSource = "upload"
)

// Deps is what the room needs.
type Deps struct {
	NodeName string
	// StateDir holds the scratch space of git-patch exports (<StateDir>/tmp/exports).
	StateDir string
	Client   client.Client
	Blobs    *artifacts.Store
	// Scoped reads an object an artifact names from this node's cache: nodekit.ErrNotYet
	// while it has not reached this node.
	Scoped func(ctx context.Context, key types.NamespacedName, obj client.Object) error
	// Root opens a root of an environment mounted on this node.
	Root func(ctx context.Context, ns, envName, rootName string) (nodekit.Root, error)
	// SessionRing is the event ring of a session this process serves (nil when none), and
	// Output the retained output of its events from..to.
	SessionRing func(sessionUID string) *ring.Ring
	Output      func(sessionUID string, from, to uint64) ([]byte, *ring.Gap, error)
	// KickSweep starts the retention sweep (an artifact being deleted drops its blob).
	KickSweep func()
	Event     nodekit.EventFunc
}

// Setup registers the room's reconciler with mgr. wake re-queues artifacts whose
// environment or session became available in this process; ofEnvironment and ofSession
// map those objects' events to the artifacts not stored yet.
func Setup(mgr ctrl.Manager, d Deps, wake <-chan event.GenericEvent, ofEnvironment, ofSession handler.MapFunc) error {
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.Artifact{}).Named("node-artifact").
		WatchesRawSource(source.Channel(wake, &handler.EnqueueRequestForObject{})).
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(ofEnvironment)).
		Watches(&wbv1.TerminalSession{}, handler.EnqueueRequestsFromMapFunc(ofSession)).
		Complete(&artifactReconciler{a: &d}); err != nil {
		return fmt.Errorf("artifact controller: %w", err)
	}
	return nil
}

type artifactReconciler struct{ a *Deps }

// Reconcile captures or exports an artifact bound to this node once into the node's
// content-addressed store and records where it is. Storing is idempotent (identical
// bytes are stored once), so a pass repeated after a failed status write is harmless.
// Uploads get their content from the data plane (resolver.UploadArtifact); they are left
// alone here.
func (r *artifactReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := r.a
	var art wbv1.Artifact
	if err := a.Client.Get(ctx, req.NamespacedName, &art); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if art.Labels[wbv1.NodeLabel] == a.NodeName && !art.DeletionTimestamp.IsZero() {
		a.KickSweep() // the sweep drops its blob and reports CleanupComplete
		return ctrl.Result{}, nil
	}
	if art.Labels[wbv1.NodeLabel] != a.NodeName || art.Status.Digest != "" || art.Status.Refusal != nil ||
		(art.Spec.Source != artifactCapture && art.Spec.Source != artifactExport) {
		return ctrl.Result{}, nil
	}
	cur, next := nodekit.ArtifactOwned(&art.Status), nodekit.ArtifactOwned(&art.Status)
	set := func(ok bool, reason, msg string) {
		statusapply.Set(&next.Conditions, &next.Conditions, statusapply.Cond(wbv1.ConditionReady, ok, reason, msg, art.Generation))
	}
	var (
		digest string
		size   int64
		note   string
		err    error
	)
	switch {
	case art.Spec.Source == artifactCapture:
		digest, size, note, err = a.captureArtifact(ctx, &art)
	case isPatchExport(&art):
		var pr *gitexport.Result
		digest, size, pr, err = a.exportPatchArtifact(ctx, &art)
		if pr != nil {
			next.Base, next.Files = pr.Base, int32(pr.Files)
			note = fmt.Sprintf(" (git-patch of %d files against %s)", pr.Files, pr.Base)
		}
	default:
		digest, size, note, err = a.exportArtifact(ctx, &art)
	}
	switch {
	case errors.Is(err, nodekit.ErrNotYet) && time.Since(art.CreationTimestamp.Time) < artifactScopeGrace:
		// Woken when its environment or session becomes available here; the requeue is the
		// grace's end.
		return ctrl.Result{RequeueAfter: statusapply.RequeueAt(time.Now(), art.CreationTimestamp.Add(artifactScopeGrace))}, nil
	case errors.Is(err, nodekit.ErrNotYet):
		err = actuation.Refusef(actuation.CodeEnvironmentUnavailable, "its environment or session did not become available on this node within %s", artifactScopeGrace)
		fallthrough
	case string(actuation.CodeOf(err)) != "":
		next.Refusal = &wbv1.Refusal{Code: string(actuation.CodeOf(err)), Message: statusapply.Truncate(err.Error(), 1024)}
		set(false, wbv1.ReasonFailed, string(actuation.CodeOf(err))+": "+err.Error())
	case err != nil:
		return ctrl.Result{}, err
	default:
		retention := DefaultRetention
		if art.Spec.RetentionSeconds > 0 {
			retention = time.Duration(art.Spec.RetentionSeconds) * time.Second
		}
		until := metav1.NewTime(art.CreationTimestamp.Add(retention))
		next.Digest, next.Size, next.RetainedUntil = wbv1.Digest(digest), size, &until
		set(true, "Stored", fmt.Sprintf("%d bytes held by node %s%s", size, a.NodeName, note))
	}
	next.NodeName, next.ObservedGeneration = a.NodeName, art.Generation
	wrote, err := statusapply.Apply(ctx, a.Client, nodekit.FieldManager+"artifact", &art, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wrote {
		if next.Refusal != nil {
			a.Event(&art, corev1.EventTypeWarning, "Refused", next.Refusal.Code+": "+next.Refusal.Message)
		} else {
			a.Event(&art, corev1.EventTypeNormal, "Stored", "Artifact stored as "+digest)
		}
	}
	return ctrl.Result{}, nil
}

// captureArtifact stores the output bytes a session's event ring retains.
func (a *Deps) captureArtifact(ctx context.Context, art *wbv1.Artifact) (string, int64, string, error) {
	if art.Spec.SessionRef == nil {
		return "", 0, "", actuation.Refusef(actuation.CodeSessionMissing, "a capture names a session (spec.sessionRef)")
	}
	key := types.NamespacedName{Namespace: art.Namespace, Name: string(*art.Spec.SessionRef)}
	var ts wbv1.TerminalSession
	if err := a.Scoped(ctx, key, &ts); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return "", 0, "", actuation.Refusef(actuation.CodeSessionMissing, "session %s does not exist", key)
		case errors.Is(err, nodekit.ErrNotYet):
			return "", 0, "", err
		}
		return "", 0, "", fmt.Errorf("reading TerminalSession %s: %w", key, err)
	}
	if ts.Spec.EnvironmentRef != art.Spec.EnvironmentRef {
		return "", 0, "", actuation.Refusef(actuation.CodeSessionMissing, "session %s is not a session of environment %s", key, art.Spec.EnvironmentRef)
	}
	rg := a.SessionRing(string(ts.UID))
	if rg == nil {
		if wbv1.SessionPhaseIsFinal(ts.Status.Phase) {
			return "", 0, "", actuation.Refusef(actuation.CodeSessionClosed, "session %s is %s; its output is gone", key, ts.Status.Phase)
		}
		return "", 0, "", nodekit.ErrNotYet
	}
	last := rg.LastSeq()
	out, gap, err := a.Output(string(ts.UID), 1, last)
	if err != nil {
		return "", 0, "", actuation.Refusef(actuation.CodeSessionClosed, "%v", err)
	}
	note := fmt.Sprintf(" (output up to event %d", last)
	if gap != nil {
		note += fmt.Sprintf("; events %d-%d had left the ring", gap.FromSeq, gap.ToSeq)
	}
	digest, size, err := a.Blobs.Put(bytes.NewReader(out), maxArtifactBytes)
	return digest, size, note + ")", err
}

// exportArtifact stores a deterministic tar of a subtree of an environment root, exported
// by the root's file access (backends.RootFiles.Export: the backend's own way).
func (a *Deps) exportArtifact(ctx context.Context, art *wbv1.Artifact) (string, int64, string, error) {
	if art.Spec.Root == nil {
		return "", 0, "", actuation.Refusef(actuation.CodeRootNotAllowed, "an export names a root (spec.root)")
	}
	rel := ""
	if art.Spec.Path != nil {
		rel = string(*art.Spec.Path)
	}
	var env wbv1.Environment
	if err := a.Scoped(ctx, types.NamespacedName{Namespace: art.Namespace, Name: string(art.Spec.EnvironmentRef)}, &env); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return "", 0, "", actuation.Refusef(actuation.CodeEnvironmentUnavailable, "environment %s does not exist", art.Spec.EnvironmentRef)
		case errors.Is(err, nodekit.ErrNotYet):
			return "", 0, "", err
		}
		return "", 0, "", fmt.Errorf("reading Environment %s: %w", art.Spec.EnvironmentRef, err)
	}
	ra, err := a.Root(ctx, art.Namespace, env.Name, string(*art.Spec.Root))
	if err != nil {
		return "", 0, "", err
	}
	lim := fixture.Limits{MaxBytes: maxArtifactBytes}
	note := ""
	digest, size, err := a.putStream(gzipIf(art.Spec.Format != nil && *art.Spec.Format == wbv1.ExportFormatTarGzip, func(w io.Writer) error {
		// The root's backend exports it: a host root through fixture.ExportRoot, a managed
		// copy through its fixture.Manager (same format), a guest's archive validated and
		// re-encoded in the same format.
		ctx, cancel := context.WithTimeout(ctx, guestExportTimeout)
		defer cancel()
		_, err := ra.Files.Export(ctx, rel, w, lim)
		if o := ra.Files.Origin(); o != "" {
			note = " (exported from " + o + ")"
		}
		return err
	}))
	return digest, size, note, err
}

var errPutEnded = errors.New("the artifact store stopped reading")

// putStream stores what write produces, bounded by maxArtifactBytes, without holding it
// in memory. A refusal of the writer (symlink, cap) or of the store wins over the
// secondary error it causes on the other side of the pipe.
func (a *Deps) putStream(write func(io.Writer) error) (string, int64, error) {
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := write(pw)
		pw.CloseWithError(err) // nil: EOF
		done <- err
	}()
	digest, size, perr := a.Blobs.Put(pr, maxArtifactBytes)
	pr.CloseWithError(errPutEnded) // unblocks the writer when the store stopped early
	werr := <-done
	switch {
	case string(actuation.CodeOf(werr)) != "":
		return "", 0, werr
	case perr != nil:
		return "", 0, perr
	case werr != nil:
		return "", 0, werr
	}
	return digest, size, nil
}
