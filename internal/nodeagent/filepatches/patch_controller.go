// Package filepatches is the node agent's room for FilePatches: it applies an approved
// patch at most once to one root of an environment mounted on this node (a host
// directory or a directory inside a VM guest), with the store recording Applying before
// any file is touched, and publishes the outcome.
package filepatches

import (
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
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/convert"
	"sensorium.dev/workbench/internal/nodeagent/artifacts"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/patch"
	"sensorium.dev/workbench/internal/statusapply"
)

// FilePatch phases, and the reasons of its Applied condition they derive from.
const (
	patchAwaitingApproval = wbv1.FilePatchAwaitingApproval
	patchApplied          = wbv1.FilePatchApplied
	patchRejected         = wbv1.FilePatchRejected

	reasonAwaitingApproval = wbv1.ReasonAwaitingApproval
	reasonApprovalRejected = "ApprovalRejected"
	reasonInterrupted      = "Interrupted"

	// approval states of spec.approval.
	approvalApproved wbv1.PatchApprovalState = "Approved"
	approvalRejected wbv1.PatchApprovalState = "Rejected"
)

// IsFinal says whether a patch has its outcome.
func IsFinal(s *wbv1.FilePatchStatus) bool { return wbv1.FilePatchIsFinal(s.Phase) }

// patchPhaseFor is wbv1.FilePatchPhaseFor (the one derivation, in api/v1alpha1).
func patchPhaseFor(conds []metav1.Condition) wbv1.FilePatchPhase {
	return wbv1.FilePatchPhaseFor(conds)
}

func patchOwned(s *wbv1.FilePatchStatus) wbv1.FilePatchStatus {
	return wbv1.FilePatchStatus{
		Phase: s.Phase, ChangedFiles: s.ChangedFiles, Refusal: s.Refusal, ObservedGeneration: s.ObservedGeneration,
		Conditions: statusapply.Owned(s.Conditions, wbv1.ConditionApplied, wbv1.ConditionReconciling, wbv1.ConditionStalled),
	}
}

// Deps is what the room needs.
type Deps struct {
	NodeName string
	Client   client.Client
	Reader   client.Reader
	// Store records each patch's Applying and outcome; Blobs holds the artifacts a patch
	// may carry its bytes in.
	Store *store.DB
	Blobs *artifacts.Store
	// Scoped reads an object a patch names from this node's cache: nodekit.ErrNotYet while
	// it has not reached this node.
	Scoped func(ctx context.Context, key types.NamespacedName, obj client.Object) error
	// Root opens a root of an environment mounted on this node (nodekit.ErrNotYet while it
	// is not mounted here).
	Root     func(ctx context.Context, ns, envName, rootName string) (nodekit.Root, error)
	Recorder Recorder
	Event    nodekit.EventFunc
	// GuestTimeout bounds a patch applied inside a VM guest (planning reads, stages, commit).
	GuestTimeout time.Duration
}

// Recorder is the recordings room's hooks around a patch's apply (seed 004).
type Recorder interface {
	Before(ctx context.Context, env *wbv1.Environment, session, objUID string)
	AfterPatch(fp *wbv1.FilePatch, env *wbv1.Environment)
	Discard(objUID string)
}

type patchReconciler struct{ a *Deps }

type patchPass struct {
	fp     *wbv1.FilePatch
	next   *wbv1.FilePatchStatus
	result ctrl.Result
	skip   bool // the stored status is already final: write nothing
}

func (p *patchPass) set(st metav1.ConditionStatus, reason, msg string) {
	c := statusapply.Cond(wbv1.ConditionApplied, false, reason, msg, p.fp.Generation)
	c.Status = st
	statusapply.Set(&p.next.Conditions, &p.next.Conditions, c)
}

func (p *patchPass) applied(files []store.PatchFile) {
	p.next.Refusal, p.next.ChangedFiles = nil, nil
	for _, f := range files {
		op := wbv1.FileOperationKind(f.Op)
		if f.Op == string(patch.OpModify) {
			op = "replace" // a unified-diff hunk edit replaces the file's content
		}
		p.next.ChangedFiles = append(p.next.ChangedFiles, wbv1.ChangedFile{Path: wbv1.RelativePath(f.Path), Op: op,
			DigestBefore: wbv1.Digest(f.DigestBefore), DigestAfter: wbv1.Digest(f.DigestAfter)})
	}
	p.set(metav1.ConditionTrue, string(patchApplied), fmt.Sprintf("%d files changed on node", len(files)))
}

// unknown reports an apply whose effect cannot be proved: Applied=Unknown with refusal
// interrupted; the patch is never retried.
func (p *patchPass) unknown(why string) {
	p.next.ChangedFiles = nil
	p.next.Refusal = &wbv1.Refusal{Code: string(actuation.CodeInterrupted),
		Message: statusapply.Truncate(why+"; which files changed is unknown and it is never retried: inspect the root", 1024)}
	p.set(metav1.ConditionUnknown, reasonInterrupted, "interrupted while applying: outcome unknown")
}

func (p *patchPass) reject(code, msg string) {
	p.next.ChangedFiles = nil
	p.next.Refusal = &wbv1.Refusal{Code: code, Message: statusapply.Truncate(msg, 1024)}
	p.set(metav1.ConditionFalse, string(patchRejected), code+": "+msg)
}

func (r *patchReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := r.a
	var fp wbv1.FilePatch
	if err := a.Client.Get(ctx, req.NamespacedName, &fp); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	if fp.Labels[wbv1.NodeLabel] != a.NodeName || IsFinal(&fp.Status) {
		return ctrl.Result{}, nil
	}
	cur, next := patchOwned(&fp.Status), patchOwned(&fp.Status)
	p := &patchPass{fp: &fp, next: &next}
	if err := r.step(ctx, p); err != nil || p.skip {
		return p.result, err
	}
	next.Phase = patchPhaseFor(next.Conditions)
	next.ObservedGeneration = fp.Generation
	nodekit.SetHealth(&next.Conditions, wbv1.FilePatchHealth(next.Phase), string(next.Phase), "patch is "+string(next.Phase), fp.Generation)
	wrote, err := statusapply.Apply(ctx, a.Client, nodekit.FieldManager+"patch", &fp, cur, next)
	if err != nil {
		return ctrl.Result{}, err
	}
	if wrote && cur.Phase != next.Phase {
		evType := corev1.EventTypeNormal
		if next.Phase == patchRejected {
			evType = corev1.EventTypeWarning
		}
		a.Event(&fp, evType, string(next.Phase), "FilePatch is "+string(next.Phase)+" on node "+a.NodeName)
	}
	return p.result, nil
}

// step decides one pass. A patch applies at most once: the store records Applying before
// any file is touched, and any record of the patch's UID decides the outcome from then on
// (a record a restart left Applying was marked interrupted: its outcome is unknown and it
// is never retried).
func (r *patchReconciler) step(ctx context.Context, p *patchPass) error {
	a := r.a
	fp := p.fp
	uid := string(fp.UID)
	rec, ok, err := a.Store.Patches().Get(uid)
	if err != nil {
		return err
	}
	if ok {
		var fresh wbv1.FilePatch
		if err := a.Reader.Get(ctx, client.ObjectKeyFromObject(fp), &fresh); err != nil {
			return client.IgnoreNotFound(err)
		}
		if IsFinal(&fresh.Status) {
			p.skip = true // the cache is behind our own write
			return nil
		}
		switch {
		case rec.Phase == string(patchApplied):
			p.applied(rec.ChangedFiles)
		case rec.Phase == string(patchRejected) && rec.RefusalCode == "":
			p.set(metav1.ConditionFalse, reasonApprovalRejected, "an operator rejected the patch")
		case rec.Phase == string(patchRejected):
			p.reject(rec.RefusalCode, "refused on node "+a.NodeName)
		default:
			p.unknown("the node agent stopped while applying the patch, or a VM guest's answer was lost")
		}
		return nil
	}
	if fp.Spec.Approval == approvalRejected {
		if err := a.recordPatch(fp, "", string(patchRejected), "", nil); err != nil {
			return err
		}
		p.set(metav1.ConditionFalse, reasonApprovalRejected, "an operator rejected the patch")
		return nil
	}
	var env wbv1.Environment
	if err := a.Scoped(ctx, types.NamespacedName{Namespace: fp.Namespace, Name: string(fp.Spec.EnvironmentRef)}, &env); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			p.reject(string(actuation.CodeEnvironmentUnavailable), "environment "+string(fp.Spec.EnvironmentRef)+" does not exist")
			return nil
		case errors.Is(err, nodekit.ErrNotYet):
			return nil // the object reaching this node's cache wakes the patch
		}
		return err
	}
	auto := env.Spec.PatchApproval != nil && *env.Spec.PatchApproval == wbv1.PatchApprovalAutoApply
	if !auto && fp.Spec.Approval != approvalApproved {
		p.set(metav1.ConditionFalse, reasonAwaitingApproval, "environment "+env.Name+" requires an operator's approval (approve on filepatches)")
		return nil // the approval is a spec change: it triggers the next pass
	}
	ra, err := a.Root(ctx, fp.Namespace, env.Name, string(fp.Spec.Root))
	mr := ra.Mount
	switch {
	case errors.Is(err, nodekit.ErrNotYet):
		return nil // environmentAvailable wakes the patch once the environment is mounted here
	case string(actuation.CodeOf(err)) != "":
		p.reject(string(actuation.CodeOf(err)), err.Error())
		return nil
	case err != nil:
		return err
	case mr.ReadOnly:
		p.reject(string(actuation.CodeRootNotAllowed), "root "+mr.Name+" is read-only")
		return nil
	}
	req, err := a.patchRequest(ctx, fp, &env)
	switch {
	case errors.Is(err, nodekit.ErrNotYet):
		return nil // the artifact's status (stored here) wakes the patch
	case string(actuation.CodeOf(err)) != "":
		p.reject(string(actuation.CodeOf(err)), err.Error())
		return nil
	case err != nil:
		return err
	}
	if err := a.recordPatch(fp, string(env.UID), store.PhaseApplying, "", nil); err != nil {
		return err
	}
	a.Recorder.Before(ctx, &env, "", string(fp.UID)) // seed 004: state before, when recorded
	var res *patch.Result
	// Bounded for a root inside a guest (planning reads, stages, commit); a host root's
	// apply is local.
	gctx, cancel := context.WithTimeout(ctx, a.GuestTimeout)
	res, err = ra.Files.ApplyPatch(gctx, req)
	cancel()
	if errors.Is(err, backends.ErrPatchOutcomeUnknown) {
		// Which files changed cannot be proved: recorded as the store records an
		// interrupted apply (never retried), reported Unknown.
		if rerr := a.recordPatch(fp, string(env.UID), store.PhaseFailed, string(actuation.CodeInterrupted), nil); rerr != nil {
			return rerr
		}
		p.unknown("applying the patch in " + originOf(ra.Files) + ": " + err.Error())
		return nil
	}
	if err != nil {
		a.Recorder.Discard(string(fp.UID)) // nothing applied: no edge
		code := string(actuation.CodeOf(err))
		if code == "" {
			code = string(actuation.CodePatchWriteFailed)
		}
		if rerr := a.recordPatch(fp, string(env.UID), string(patchRejected), code, nil); rerr != nil {
			return rerr
		}
		p.reject(code, err.Error())
		return nil
	}
	files := make([]store.PatchFile, 0, len(res.ChangedFiles))
	for _, f := range res.ChangedFiles {
		files = append(files, store.PatchFile{Path: f.Path, Op: string(f.Op), DigestBefore: f.DigestBefore, DigestAfter: f.DigestAfter})
	}
	if err := a.recordPatch(fp, string(env.UID), string(patchApplied), "", files); err != nil {
		// The files are written; a restart reports the record's Applying as unknown.
		ctrl.LoggerFrom(ctx).Error(err, "Recording applied patch", "filePatch", client.ObjectKeyFromObject(fp))
	}
	a.Recorder.AfterPatch(fp, &env) // seed 004
	p.applied(files)
	return nil
}

func (a *Deps) recordPatch(fp *wbv1.FilePatch, envUID, phase, code string, files []store.PatchFile) error {
	return a.Store.Patches().Put(store.Patch{UID: string(fp.UID), Namespace: fp.Namespace, Name: fp.Name, EnvironmentUID: envUID,
		Root: string(fp.Spec.Root), Digest: string(fp.Spec.Digest), Phase: phase, ChangedFiles: files, RefusalCode: code, UpdatedAt: time.Now()})
}

// patchRequest builds the engine request: the inline diff, the canonical JSON of the
// structured operations (the bytes the declared digest covers, see webhooks.PatchDigest),
// or the blob of the named Artifact from this node's store.
func (a *Deps) patchRequest(ctx context.Context, fp *wbv1.FilePatch, env *wbv1.Environment) (patch.Request, error) {
	pol := fp.Spec.Policy
	// The proposer's policy, capped by the environment's host-owned patchPolicy: never widened.
	eff, ref := actuation.CapPatchPolicy(convert.EnvironmentPatchPolicy(&env.Spec), convert.ProposedPatchPolicy(&fp.Spec))
	if ref != nil {
		return patch.Request{}, actuation.Refusef(actuation.Code(string(ref.Code)), "%s: %s", ref.Field, ref.Message)
	}
	req := patch.Request{Format: patch.Format(fp.Spec.Format), Digest: string(fp.Spec.Digest), Policy: patch.Policy{
		RequireCleanApply: pol.RequireCleanApply == nil || *pol.RequireCleanApply,
		AllowCreate:       eff.AllowCreate,
		AllowDelete:       eff.AllowDelete,
		MaxChangedFiles:   eff.MaxChangedFiles,
		AllowGitMetadata:  eff.AllowGitMetadata,
		AllowExecutable:   eff.AllowExecutable,
	}}
	switch {
	case fp.Spec.Format == wbv1.PatchFormatStructured:
		raw, err := actuation.CanonicalJSON(fp.Spec.Operations)
		if err != nil {
			return req, actuation.Refusef(actuation.CodePatchMalformed, "structured operations: %v", err)
		}
		req.Content = raw
	case fp.Spec.Patch != nil:
		req.Content = []byte(*fp.Spec.Patch)
	case fp.Spec.ArtifactRef != nil:
		raw, err := a.artifactBytes(ctx, types.NamespacedName{Namespace: fp.Namespace, Name: string(*fp.Spec.ArtifactRef)}, patch.MaxPatchBytes)
		if err != nil {
			return req, err
		}
		req.Content = raw
	default:
		return req, actuation.Refusef(actuation.CodePatchInvalid, "the patch carries no content")
	}
	return req, nil
}

// artifactBytes reads at most maxBytes+1 bytes of an Artifact's verified blob (the caller
// refuses anything above maxBytes).
func (a *Deps) artifactBytes(ctx context.Context, key types.NamespacedName, maxBytes int64) ([]byte, error) {
	var art wbv1.Artifact
	if err := a.Scoped(ctx, key, &art); err != nil {
		switch {
		case apierrors.IsNotFound(err):
			return nil, actuation.Refusef(actuation.CodeArtifactNotFound, "artifact %s does not exist", key)
		case errors.Is(err, nodekit.ErrNotYet):
			return nil, err // not (yet) held by this node
		}
		return nil, fmt.Errorf("reading Artifact %s: %w", key, err)
	}
	switch {
	case art.Status.Refusal != nil:
		return nil, actuation.Refusef(actuation.CodeArtifactNotFound, "artifact %s was refused (%s)", key, art.Status.Refusal.Code)
	case art.Status.Digest == "":
		return nil, nodekit.ErrNotYet
	}
	blob, err := a.Blobs.Open(string(art.Status.Digest))
	if err != nil {
		return nil, err
	}
	defer func() { _ = blob.Close() }()
	raw, err := io.ReadAll(io.LimitReader(blob, maxBytes+1))
	if err != nil {
		return nil, fmt.Errorf("reading artifact %s: %w", key, err)
	}
	return raw, nil
}

// codeOf returns the refusal code of err as the status field's string.

// Setup registers the room's reconciler with mgr. wake re-queues patches whose environment
// became available in this process; ofEnvironment and ofNamespace map an Environment's
// and an Artifact's events to the pending patches that may wait for them.
func Setup(mgr ctrl.Manager, d Deps, wake <-chan event.GenericEvent, ofEnvironment, ofNamespace handler.MapFunc) error {
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.FilePatch{}).Named("node-filepatch").
		WatchesRawSource(source.Channel(wake, &handler.EnqueueRequestForObject{})).
		Watches(&wbv1.Environment{}, handler.EnqueueRequestsFromMapFunc(ofEnvironment)).
		Watches(&wbv1.Artifact{}, handler.EnqueueRequestsFromMapFunc(ofNamespace)).
		Complete(&patchReconciler{a: &d}); err != nil {
		return fmt.Errorf("file patch controller: %w", err)
	}
	return nil
}

// originOf names where a root's files live in a message.
func originOf(f backends.RootFiles) string {
	if o := f.Origin(); o != "" {
		return o
	}
	return "the host root"
}
