package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/webhooks"

	"sensorium.dev/workbench/internal/test/kstate"
)

// kstatusOf computes kstatus for obj as held in memory.
var kstatusOf = kstate.KStatus

// eventuallyKStatus waits (at most 30 s: the manager writes the health conditions with the
// outcome it derives) until kstatus — the health library behind Flux and apply-and-wait
// tools — reads obj, as the API server returns it, as want.
func eventuallyKStatus(t *testing.T, obj client.Object, want kstatus.Status) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%T %s read %s by kstatus", obj, obj.GetName(), want), func() (bool, string) {
		must(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
		res, m := kstate.ReadKStatus(t, obj)
		return res.Status == want, fmt.Sprintf("%s (%s); status %v", res.Status, res.Message, m["status"])
	})
}

// TestImageManifestKStatus: an ImageManifest reads Current only once a node verified a
// variant of its current generation (issue 30 item 7). Until then it reads InProgress with
// status.observedGeneration written; a node reports only its own verification
// (node-restricted otherwise); a spec change needs a new verification; a generation every
// reporting node failed to verify reads Failed.
func TestImageManifestKStatus(t *testing.T) {
	ctx := context.Background()
	name := "img-" + strings.TrimPrefix(namespace(t), "wb-")
	im := &wbv1.ImageManifest{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: wbv1.ImageManifestSpec{
		Digests: wbv1.ImageDigests{Userspace: testDigest("u"), Agent: testDigest("a"), Protocol: testDigest("p")},
		Variants: []wbv1.ImageVariant{{Name: "v1", BackendID: wbv1.BackendQEMUMicroVM, Architecture: wbv1.ArchitectureX8664, BootMode: wbv1.BootModeDirectKernel,
			Kernel: &wbv1.ImageFile{Digest: testDigest("k"), Path: "guest/vmlinux"}, Initrd: &wbv1.ImageFile{Digest: testDigest("i"), Path: "guest/initrd"}}},
	}}
	must(t, env.Client.Create(ctx, im))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), im) })
	eventually(t, 20*time.Second, "observedGeneration written", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(im), im))
		return im.Status.ObservedGeneration == im.Generation, fmt.Sprintf("%+v", im.Status)
	})
	if res := kstatusOf(t, im); res.Status != kstatus.InProgressStatus {
		t.Fatalf("an image no node verified reads %s (%s), want InProgress", res.Status, res.Message)
	}

	node := func(n string) client.Client {
		crb := &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "im-" + name + "-" + n},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: webhooks.NodeUserPrefix + n}},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "workbench-node-agent"}}
		must(t, env.Client.Create(ctx, crb))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), crb) })
		cfg := rest.CopyConfig(env.Config)
		cfg.Impersonate = rest.ImpersonationConfig{UserName: webhooks.NodeUserPrefix + n, Groups: []string{webhooks.NodeGroup}}
		c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
		must(t, err)
		return c
	}
	n1 := node("im-n1")
	report := func(c client.Client, entry wbv1.ImageVerification) error {
		return retry.RetryOnConflict(retry.DefaultRetry, func() error {
			if err := c.Get(ctx, client.ObjectKeyFromObject(im), im); err != nil {
				return err
			}
			im.Status.VerifiedOn = append(im.Status.VerifiedOn, entry)
			return c.Status().Update(ctx, im)
		})
	}
	// Another node's verification cannot be forged, nor the manager's conditions written.
	mustRefuse(t, report(n1, wbv1.ImageVerification{NodeName: "im-n2", Variant: "v1", VerifiedAt: metav1.Now(), Generation: 1}), "node-restricted")
	mustRefuse(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		must(t, n1.Get(ctx, client.ObjectKeyFromObject(im), im))
		im.Status.Conditions = nil
		return n1.Status().Update(ctx, im)
	}), "node-restricted")
	must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(im), im))
	if res := kstatusOf(t, im); res.Status != kstatus.InProgressStatus {
		t.Fatalf("after refused writes the image reads %s, want InProgress", res.Status)
	}
	must(t, report(n1, wbv1.ImageVerification{NodeName: "im-n1", Variant: "v1", VerifiedAt: metav1.Now(), Generation: 1}))
	eventuallyKStatus(t, im, kstatus.CurrentStatus)

	// A new generation is not verified by the old verification.
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(im), im))
		im.Spec.Variants[0].KernelCommandLine = "console=ttyS0"
		return env.Client.Update(ctx, im)
	}))
	eventuallyKStatus(t, im, kstatus.InProgressStatus)
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		must(t, n1.Get(ctx, client.ObjectKeyFromObject(im), im))
		im.Status.VerifiedOn = []wbv1.ImageVerification{{NodeName: "im-n1", Variant: "v1", VerifiedAt: metav1.Now(), Generation: im.Generation,
			Code: "digest-mismatch", Message: "kernel content differs"}}
		return n1.Status().Update(ctx, im)
	}))
	eventuallyKStatus(t, im, kstatus.FailedStatus)
}

func testDigest(s string) wbv1.Digest {
	return wbv1.Digest(fmt.Sprintf("sha256:%064x", []byte(s)))
}

// TestEnvironmentExpires drives an Environment to Expired through its ttlSeconds (at least
// 60 for users) without sleeping a minute: the manager's clock is advanced past the expiry
// and the environment touched so the manager reconciles it. It then reads Failed through
// kstatus (an expired environment is no longer the thing asked for), with its generation
// observed. A TTL at the minimum minus one is refused.
func TestEnvironmentExpires(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	short := environment(ns, "too-short")
	short.Spec.TTLSeconds = ptr(int64(59))
	if err := env.Client.Create(ctx, short); err == nil || !strings.Contains(err.Error(), "ttlSeconds") {
		t.Fatalf("a ttlSeconds below 60 must be refused, got %v", err)
	}
	e := environment(ns, "ttl")
	e.Spec.TTLSeconds = ptr(int64(60))
	must(t, env.Client.Create(ctx, e))
	eventually(t, 20*time.Second, "environment placed", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(e), e))
		return e.Status.NodeName != "" && e.Status.ObservedGeneration == e.Generation, fmt.Sprintf("%+v", e.Status)
	})
	if e.Status.Phase == wbv1.EnvironmentExpired {
		t.Fatalf("expired before its TTL: %+v", e.Status)
	}
	// The manager's clock is shared by the whole suite: it goes back once this test is done
	// (a consent request of a later test would otherwise expire as soon as it is created).
	clock.Advance(61 * time.Second)
	t.Cleanup(func() { clock.Advance(-61 * time.Second) })
	touch := 0
	eventually(t, 20*time.Second, "environment Expired", func() (bool, string) {
		touch++
		must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
			must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(e), e))
			metav1.SetMetaDataAnnotation(&e.ObjectMeta, "test.workbench.sensorium.dev/touch", fmt.Sprint(touch))
			return env.Client.Update(ctx, e)
		}))
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(e), e))
		return e.Status.Phase == wbv1.EnvironmentExpired, fmt.Sprintf("%+v", e.Status)
	})
	eventuallyKStatus(t, e, kstatus.FailedStatus)
}
