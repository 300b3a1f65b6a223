package agent

import (
	"context"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/convert"
)

// What the environment reconciler calls around its passes: teardown of an object already
// gone, boot-image resolution, drain, and the end of an environment's artifacts.

// teardownDeleted tears down an environment whose object is gone, from the store record.
func (a *Agent) teardownDeleted(ctx context.Context, ns, name string) error {
	recs, err := a.store.Environments().List(0)
	if err != nil {
		return err
	}
	for _, e := range recs {
		if e.Namespace != ns || e.Name != name {
			continue
		}
		if b, ok := a.backends.Get(e.Backend); ok {
			if _, err := b.Teardown(ctx, specFromRecord(e)); err != nil {
				return fmt.Errorf("tearing down deleted environment %s/%s: %w", ns, name, err)
			}
		}
		a.forgetEnv(e.UID)
		if err := a.store.Environments().Delete(e.UID); err != nil {
			return err
		}
		a.wakeRootWaiters(ctx)
	}
	return nil
}

func (a *Agent) rememberEnv(spec backends.Spec, st backends.Status) { a.envs.remember(spec, st) }

func (a *Agent) forgetEnv(id string) { a.envs.forget(id); a.forgetMaterialized(id) }

// mountedRoots returns the environment's roots if it is ready in this process.
func (a *Agent) mountedRoots(envUID string) ([]backends.MountedRoot, bool) {
	return a.envs.mounted(envUID)
}

func condTrue(conds []metav1.Condition, t string) bool {
	for _, c := range conds {
		if c.Type == t {
			return c.Status == metav1.ConditionTrue
		}
	}
	return false
}

func ptrStr(p *string) string {
	if p == nil {
		return ""
	}
	return *p
}

func deref(p *int32) int32 {
	if p == nil {
		return 0
	}
	return *p
}

// resolveBootImage resolves a VM environment's spec.imageRef → ImageManifest → the variant
// for its backend on this node's architecture, and puts the boot files (paths beneath the
// backend's image directory, digests the backend verifies before booting) into spec. It
// returns a refusal code and message when the image cannot be resolved; processless
// backends need nothing.
func (a *Agent) resolveBootImage(ctx context.Context, env *wbv1.Environment, spec *backends.Spec) (string, string, error) {
	if env.Spec.Backend != wbv1.BackendQEMUMicroVM && env.Spec.Backend != wbv1.BackendVfkit {
		return "", "", nil
	}
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
	err := a.client.Get(ctx, key, &im)
	if apierrors.IsNotFound(err) {
		err = a.reader.Get(ctx, key, &im)
	}
	if err != nil {
		if apierrors.IsNotFound(err) {
			return code, fmt.Sprintf("ImageManifest %s does not exist", *env.Spec.ImageRef), nil
		}
		return "", "", fmt.Errorf("reading ImageManifest %s: %w", *env.Spec.ImageRef, err)
	}
	if env.Spec.Backend == wbv1.BackendVfkit {
		// vfkit-system.v1 boots the arm64 EFI variant from its raw disk (its capability's
		// guestArchitecture and bootMode).
		if spec.EFI = convert.EFIVariant(&im.Spec, env.Spec.Backend, wbv1.ArchitectureARM64); spec.EFI == nil {
			return code, fmt.Sprintf("ImageManifest %s has no efi %s variant with a disk for arm64", im.Name, env.Spec.Backend), nil
		}
		return "", "", nil
	}
	arch := wbv1.ArchitectureX8664 // qemu-microvm.v1 runs qemu-system-x86_64 guests (its capability's guestArchitecture)
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

// drainEnvironment stops the environment's running commands and closes its sessions, and
// waits (bounded by drainWait) for the commands' outcomes to be recorded.
func (a *Agent) drainEnvironment(ctx context.Context, envUID string) {
	stopped := a.stopCommands(func(lc *liveCommand) bool { return lc.EnvUID == envUID })
	for _, uid := range a.sess.OpenIn(envUID) {
		a.closeSession(ctx, uid, false)
	}
	t := time.NewTimer(drainWait)
	defer t.Stop()
	for _, lc := range stopped {
		if lc.Finished == nil {
			continue // a guest command: cancelling it ended its wait
		}
		select {
		case <-lc.Finished:
		case <-t.C:
			return
		case <-ctx.Done():
			return
		}
	}
}

// drainWait bounds how long a drain waits for stopped commands to record their outcomes.
const drainWait = 10 * time.Second

// expireArtifactsOf ends the retention of the artifacts of an environment deleted with
// teardown Delete: their retainedUntil becomes now, and the artifact sweep removes the blobs.
func (a *Agent) expireArtifactsOf(ctx context.Context, env *wbv1.Environment) error {
	var list wbv1.ArtifactList
	if err := a.client.List(ctx, &list, client.InNamespace(env.Namespace)); err != nil {
		return fmt.Errorf("listing artifacts of environment %s/%s: %w", env.Namespace, env.Name, err)
	}
	now := metav1.Now()
	for i := range list.Items {
		art := &list.Items[i]
		if art.Spec.EnvironmentRef != wbv1.ObjectName(env.Name) || art.Status.Digest == "" ||
			(art.Status.RetainedUntil != nil && !art.Status.RetainedUntil.After(now.Time)) {
			continue
		}
		if err := a.expireArtifact(ctx, art, now, "the environment was deleted with teardown Delete"); err != nil {
			return err
		}
	}
	a.kickArtifactSweep()
	return nil
}
