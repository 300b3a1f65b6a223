package environments

import (
	"context"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/convert"
)

// What the environment reconciler calls around its passes: teardown of an object already
// gone, of an expired or deleted one and of one on a cordoned node, and boot-image
// resolution. Draining an environment's commands and sessions and ending its artifacts are
// the agent's (Deps.Drain, Deps.MarkDrained, Deps.ExpireArtifacts).

// teardownDeleted tears down an environment whose object is gone, from the store record.
func (a *Room) teardownDeleted(ctx context.Context, ns, name string) error {
	recs, err := a.d.Store.Environments().List(0)
	if err != nil {
		return err
	}
	for _, e := range recs {
		if e.Namespace != ns || e.Name != name {
			continue
		}
		if b, ok := a.d.Backends.Get(e.Backend); ok {
			if _, err := b.Teardown(ctx, SpecFromRecord(e)); err != nil {
				return fmt.Errorf("tearing down deleted environment %s/%s: %w", ns, name, err)
			}
		}
		a.forgetEnv(e.UID)
		if err := a.d.Store.Environments().Delete(e.UID); err != nil {
			return err
		}
		a.wakeRootWaiters(ctx)
	}
	return nil
}

// forgetEnv drops an environment's live state: its registry entry and pinned roots, and
// what mergeSources remembered of its sourced roots.
func (a *Room) forgetEnv(id string) { a.d.Registry.Forget(id); a.forgetMaterialized(id) }

// tearDown tears down an expired or deleted environment: a deleted one is drained first
// (its commands stopped, its sessions closed, the backend drained) and its artifacts end
// unless spec.teardown retains them.
func (a *Room) tearDown(ctx context.Context, p *pass, b backends.Backend, spec backends.Spec, deleting bool) error {
	env := p.env
	if deleting {
		// reconcileDelete: drain (stop the environment's commands, close its sessions),
		// then tear down per spec.teardown.
		p.set(wbv1.ConditionReady, false, wbv1.ReasonDraining, "draining: stopping commands and closing sessions")
		a.d.Drain(ctx, spec.ID)
		if _, err := b.Drain(ctx, spec); err != nil {
			// Nothing left to drain (no VM runs) must not block the teardown.
			ctrl.LoggerFrom(ctx).Info("Drain before teardown failed; tearing down", "environment", client.ObjectKeyFromObject(env), "error", err.Error())
		}
		if env.Spec.Teardown == nil || *env.Spec.Teardown != wbv1.TeardownRetainArtifacts {
			if err := a.d.ExpireArtifacts(ctx, env); err != nil {
				return err
			}
		}
	}
	st, err := b.Teardown(ctx, spec)
	a.forgetEnv(spec.ID)
	if err != nil || len(st.Residue) > 0 {
		p.set(wbv1.ConditionCleanupComplete, false, "TeardownIncomplete", fmt.Sprintf("teardown left %v: %v", st.Residue, err))
		p.set(wbv1.ConditionDegraded, true, "TeardownIncomplete", "resources remain after teardown")
		p.result.RequeueAfter = 10 * time.Second
	} else {
		p.set(wbv1.ConditionCleanupComplete, true, "TornDown", "backend resources removed")
		if err := a.d.Store.Environments().Delete(spec.ID); err != nil {
			return fmt.Errorf("deleting the store record of environment %s/%s: %w", env.Namespace, env.Name, err)
		}
		a.wakeRootWaiters(ctx) // its host directories are free (tenancy.go)
		p.result = ctrl.Result{}
	}
	reason := wbv1.ReasonExpired
	if !meta.IsStatusConditionTrue(p.all, wbv1.ConditionExpired) {
		reason = wbv1.ReasonClosed
	}
	p.set(wbv1.ConditionReady, false, reason, "environment is "+reason)
	return nil
}

// drainForCordon is kubectl drain of the node (the agent's node_drain.go): it stops the
// environment's commands (interrupted), closes its sessions, drains the backend and tears
// it down; uncordon allocates it again.
func (a *Room) drainForCordon(ctx context.Context, p *pass, b backends.Backend, spec backends.Spec, wasMounted bool) error {
	env := p.env
	p.set(wbv1.ConditionReady, false, wbv1.ReasonDraining, string(actuation.CodeNodeDraining)+": node "+a.d.NodeName+
		" is cordoned (kubectl drain): commands interrupted, sessions closed, backend resources torn down; kubectl uncordon restores the environment")
	p.result = ctrl.Result{}
	if !wasMounted {
		if _, found, err := a.d.Store.Environments().Get(spec.ID); err != nil || !found {
			return nil // nothing allocated here (or already torn down by an earlier pass)
		}
	}
	a.d.MarkDrained(spec.ID)
	a.d.Drain(ctx, spec.ID)
	if _, err := b.Drain(ctx, spec); err != nil {
		ctrl.LoggerFrom(ctx).Info("Backend drain before the drain's teardown failed; tearing down", "environment", client.ObjectKeyFromObject(env), "error", err.Error())
	}
	st, err := b.Teardown(ctx, spec)
	a.forgetEnv(spec.ID)
	if err != nil || len(st.Residue) > 0 {
		p.set(wbv1.ConditionDegraded, true, "TeardownIncomplete", fmt.Sprintf("drain teardown left %v: %v", st.Residue, err))
		p.result.RequeueAfter = 10 * time.Second
		return nil
	}
	if err := a.d.Store.Environments().Delete(spec.ID); err != nil {
		return fmt.Errorf("deleting the store record of drained environment %s/%s: %w", env.Namespace, env.Name, err)
	}
	a.wakeRootWaiters(ctx)
	a.d.Event(env, corev1.EventTypeNormal, "Drained", "node "+a.d.NodeName+" is cordoned: environment drained and torn down")
	return nil
}

// resolveBootImage resolves a VM environment's spec.imageRef → ImageManifest → the variant
// its backend b boots (b's own answer, backends.ImageBooter: architecture and boot mode),
// and puts the boot files (paths beneath the backend's image directory, digests the
// backend verifies before booting) into spec. It returns a refusal code and message when
// the image cannot be resolved; a backend that boots no image needs nothing.
func (a *Room) resolveBootImage(ctx context.Context, env *wbv1.Environment, b backends.Backend, spec *backends.Spec) (string, string, error) {
	booter, ok := b.(backends.ImageBooter)
	if !ok {
		return "", "", nil
	}
	boot := booter.BootVariant()
	code := string(actuation.CodeImageInvalid)
	if env.Spec.ImageRef == nil || *env.Spec.ImageRef == "" {
		return code, fmt.Sprintf("%s needs spec.imageRef naming an ImageManifest", env.Spec.Backend), nil
	}
	// From the agent's cache (a pool claim resolves the image on its path to Ready; the API
	// server round trip cost one request per pass); a manifest the cache has not seen yet
	// is read from the API server before it is called missing. The boot files' digests are
	// verified by the backend before a boot, whichever copy of the manifest named them.
	var im wbv1.ImageManifest
	key := types.NamespacedName{Name: *env.Spec.ImageRef}
	err := a.d.Client.Get(ctx, key, &im)
	if apierrors.IsNotFound(err) {
		err = a.d.Reader.Get(ctx, key, &im)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return code, fmt.Sprintf("ImageManifest %s does not exist", *env.Spec.ImageRef), nil
		}
		return "", "", fmt.Errorf("reading ImageManifest %s: %w", *env.Spec.ImageRef, err)
	}
	arch := wbv1.Architecture(boot.Architecture)
	if boot.EFI {
		// An EFI-booting backend (vfkit-system.v1) boots the EFI variant from its raw disk.
		if spec.EFI = convert.EFIVariant(&im.Spec, env.Spec.Backend, arch); spec.EFI == nil {
			return code, fmt.Sprintf("ImageManifest %s has no efi %s variant with a disk for %s", im.Name, env.Spec.Backend, arch), nil
		}
		return "", "", nil
	}
	// An environment that needs full-system-linux boots only a variant with a disk (the
	// minimal initramfs variant is process-runtime), and such a manifest must carry the
	// equivalence fields (the admission rule, checked again here: the manifest may predate it).
	needFull := env.Spec.Requirements != nil && env.Spec.Requirements.SystemFidelity != nil &&
		*env.Spec.Requirements.SystemFidelity == wbv1.SystemFidelity("full-system-linux")
	for _, v := range im.Spec.Variants {
		if v.BackendID != env.Spec.Backend || v.Architecture != arch || v.BootMode != wbv1.BootModeDirectKernel || v.Kernel == nil || v.Initrd == nil {
			continue
		}
		if needFull && v.Disk == nil {
			continue
		}
		spec.Boot = &backends.BootImage{Variant: v.Name, KernelPath: string(v.Kernel.Path), KernelDigest: string(v.Kernel.Digest),
			InitrdPath: string(v.Initrd.Path), InitrdDigest: string(v.Initrd.Digest), CommandLine: v.KernelCommandLine}
		if v.Disk != nil {
			d := im.Spec.Digests
			if missing := actuation.MissingImageEquivalence(actuation.ImageEquivalence{Userspace: string(d.Userspace), SBOM: string(d.SBOM),
				Provenance: string(d.Provenance), ProvenanceRef: d.ProvenanceRef, Agent: string(d.Agent), Protocol: string(d.Protocol)}); len(missing) > 0 {
				return code, fmt.Sprintf("ImageManifest %s has a full-system variant but lacks %s", im.Name, strings.Join(missing, ", ")), nil
			}
			spec.Boot.DiskPath, spec.Boot.DiskDigest = string(v.Disk.Path), string(v.Disk.Digest)
		}
		return "", "", nil
	}
	if needFull {
		return code, fmt.Sprintf("ImageManifest %s has no full-system (disk) %s variant for %s, and the environment requires full-system-linux", im.Name, env.Spec.Backend, arch), nil
	}
	return code, fmt.Sprintf("ImageManifest %s has no direct-kernel %s variant with a kernel and an initrd for %s", im.Name, env.Spec.Backend, arch), nil
}
