// Package imagemanifests is the node agent's room for ImageManifests: it verifies, on this
// node, the boot images its backends boot and records the result under the node's own
// field manager.
package imagemanifests

import (
	"context"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/statusapply"
)

// bootImageVerifier is a backend that can verify a boot image's files on this node.
type bootImageVerifier interface {
	VerifyBootImage(img *backends.BootImage) error
}

// imageManifestReconciler verifies, on this node, every variant of an ImageManifest that a
// backend of this node boots (its files beneath the image directory, their digests), and
// records the result as this node's entries of status.verifiedOn, for the manifest's
// current generation (issue 30 item 7: an ImageManifest reads Current only after a node
// verified it). Each node applies only its own entries, under its own field manager.
type imageManifestReconciler struct{ d *Deps }

// Deps is what the room needs: the node's name, its backends and the API client.
type Deps struct {
	NodeName string
	Backends *backends.Registry
	Client   client.Client
}

type imageManifestNodeStatus struct {
	VerifiedOn []wbv1.ImageVerification `json:"verifiedOn,omitempty"`
}

func (r *imageManifestReconciler) Reconcile(ctx context.Context, req ctrl.Request) (ctrl.Result, error) {
	a := r.d
	var im wbv1.ImageManifest
	if err := a.Client.Get(ctx, req.NamespacedName, &im); err != nil {
		return ctrl.Result{}, client.IgnoreNotFound(err)
	}
	var cur, next imageManifestNodeStatus
	for _, v := range im.Status.VerifiedOn {
		if v.NodeName == a.NodeName {
			cur.VerifiedOn = append(cur.VerifiedOn, v)
		}
	}
	for _, v := range im.Spec.Variants {
		b, ok := a.Backends.Get(string(v.BackendID))
		if !ok {
			continue
		}
		vb, ok := b.(bootImageVerifier)
		if !ok || v.BootMode != wbv1.BootModeDirectKernel || v.Kernel == nil || v.Initrd == nil {
			continue
		}
		// Verified before for this generation: the entry stands (the backend re-verifies
		// the digests before every boot).
		if prev := findVerification(cur.VerifiedOn, v.Name); prev != nil && prev.Generation == im.Generation {
			next.VerifiedOn = append(next.VerifiedOn, *prev)
			continue
		}
		e := wbv1.ImageVerification{NodeName: a.NodeName, Variant: v.Name, VerifiedAt: metav1.Now(), Generation: im.Generation}
		err := vb.VerifyBootImage(&backends.BootImage{Variant: v.Name, KernelPath: string(v.Kernel.Path), KernelDigest: string(v.Kernel.Digest),
			InitrdPath: string(v.Initrd.Path), InitrdDigest: string(v.Initrd.Digest), CommandLine: v.KernelCommandLine})
		if err != nil {
			e.Code, e.Message = string(actuation.CodeImageInvalid), statusapply.Truncate(err.Error(), 1024)
			if c := actuation.CodeOf(err); c != "" {
				e.Code = string(c)
			}
		}
		next.VerifiedOn = append(next.VerifiedOn, e)
	}
	if _, err := statusapply.Apply(ctx, a.Client, nodekit.FieldManager+"imagemanifest/"+a.NodeName, &im, cur, next); err != nil {
		return ctrl.Result{}, fmt.Errorf("recording verification of ImageManifest %s: %w", im.Name, err)
	}
	return ctrl.Result{}, nil
}

func findVerification(vs []wbv1.ImageVerification, variant string) *wbv1.ImageVerification {
	for i := range vs {
		if vs[i].Variant == variant {
			return &vs[i]
		}
	}
	return nil
}

// Setup registers the room's reconciler with mgr.
func Setup(mgr ctrl.Manager, d Deps) error {
	if err := ctrl.NewControllerManagedBy(mgr).For(&wbv1.ImageManifest{}).Named("node-imagemanifest").
		Complete(&imageManifestReconciler{d: &d}); err != nil {
		return fmt.Errorf("image manifest controller: %w", err)
	}
	return nil
}
