package controllers

import (
	"context"
	"crypto/ed25519"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/test/testkit"
)

func condOf(cs []metav1.Condition, typ string) string {
	c := meta.FindStatusCondition(cs, typ)
	if c == nil {
		return "absent"
	}
	return string(c.Status) + "/" + c.Reason
}

// TestImageManifestHealthFollowsItsGeneration: a manifest no node verified is Reconciling
// (Ready False, AwaitingVerification) with observedGeneration at its generation; a failed
// verification of this generation makes it Stalled; a success Ready; and a spec change
// (a new generation) is not Ready on the strength of the previous generation's verification.
func TestImageManifestHealthFollowsItsGeneration(t *testing.T) {
	ctx := context.Background()
	raw, err := os.ReadFile(filepath.Join(env.Root, "config", "samples", "07_imagemanifest.yaml"))
	testkit.Must(t, err)
	var im wbv1.ImageManifest
	testkit.Must(t, yaml.Unmarshal(raw, &im))
	im.Name = "ctl-test-image"
	testkit.Must(t, env.Client.Create(ctx, &im))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), &im) })
	r := &ImageManifestReconciler{Client: env.Client}
	check := func(step, ready, reconciling, stalled string) {
		t.Helper()
		reconcileOnce(t, r, &im)
		got := get(t, &wbv1.ImageManifest{ObjectMeta: metav1.ObjectMeta{Name: im.Name}})
		if got.Status.ObservedGeneration != got.Generation {
			t.Fatalf("%s: observedGeneration %d, generation %d", step, got.Status.ObservedGeneration, got.Generation)
		}
		if g := [3]string{condOf(got.Status.Conditions, wbv1.ConditionReady), condOf(got.Status.Conditions, wbv1.ConditionReconciling), condOf(got.Status.Conditions, wbv1.ConditionStalled)}; g != [3]string{ready, reconciling, stalled} {
			t.Fatalf("%s: Ready, Reconciling, Stalled = %v, want %v", step, g, [3]string{ready, reconciling, stalled})
		}
		im = *got
	}
	check("unverified", "False/AwaitingVerification", "True/AwaitingVerification", "False/AwaitingVerification")

	variant := im.Spec.Variants[0].Name
	im.Status.VerifiedOn = []wbv1.ImageVerification{{NodeName: "node-1", Variant: variant, VerifiedAt: metav1.Now(), Generation: im.Generation, Code: "digest-mismatch", Message: "kernel differs"}}
	testkit.Must(t, env.Client.Status().Update(ctx, &im))
	check("failed on every node", "False/VerificationFailed", "False/VerificationFailed", "True/VerificationFailed")

	im.Status.VerifiedOn = append(im.Status.VerifiedOn, wbv1.ImageVerification{NodeName: "node-2", Variant: variant, VerifiedAt: metav1.Now(), Generation: im.Generation})
	testkit.Must(t, env.Client.Status().Update(ctx, &im))
	check("verified on one node", "True/Verified", "False/Verified", "False/Verified")

	im.Spec.Variants[0].KernelCommandLine += " loglevel=3"
	testkit.Must(t, env.Client.Update(ctx, &im))
	check("new generation", "False/AwaitingVerification", "True/AwaitingVerification", "False/AwaitingVerification")
	if m := statusManagers(&im); !hasManager(&im, FieldManagerPrefix+"imagemanifest") || len(m) != 2 {
		t.Fatalf("status managers %v: want the node writer of verifiedOn and the manager's imagemanifest", m)
	}
}

// TestDeclaredHealthReadsAsUsersDo: a declared kind is Valid and Current as applied when
// its check passes (a signer's key id recorded), Invalid and Stalled with the check's error
// when it does not; fixing it clears the stall at the new generation.
func TestDeclaredHealthReadsAsUsersDo(t *testing.T) {
	ctx := context.Background()
	pub, _, err := ed25519.GenerateKey(nil)
	testkit.Must(t, err)
	s := &wbv1.ActionSigner{ObjectMeta: metav1.ObjectMeta{Name: "ctl-test-signer"}, Spec: wbv1.ActionSignerSpec{
		PublicKey: base64.StdEncoding.EncodeToString(pub), Namespaces: []string{"team-a"}, Classes: []wbv1.ActionClass{wbv1.ActionClassReadOnlySpawn}}}
	testkit.Must(t, env.Client.Create(ctx, s))
	t.Cleanup(func() { _ = env.Client.Delete(context.Background(), s) })
	var rs []*DeclaredHealthReconciler[*wbv1.ActionSigner]
	for _, d := range declaredReconcilers(env.Client) {
		if r, ok := d.(*DeclaredHealthReconciler[*wbv1.ActionSigner]); ok {
			rs = append(rs, r)
		}
	}
	if len(rs) != 1 {
		t.Fatalf("declaredReconcilers has %d ActionSigner reconcilers", len(rs))
	}
	r := rs[0]
	reconcileOnce(t, r, s)
	s = get(t, s)
	if s.Status.KeyID != wbv1.Digest(actions.KeyID(pub)) || condOf(s.Status.Conditions, wbv1.ConditionValid) != "True/Valid" ||
		condOf(s.Status.Conditions, wbv1.ConditionStalled) != "False/Valid" || s.Status.ObservedGeneration != s.Generation {
		t.Fatalf("a valid signer: %+v", s.Status)
	}

	// What the webhook admits may still fail its users' check later (here: a check that
	// refuses it); the reconciler reports that as a stall, with the check's words.
	refusing := *r
	refusing.Check = func(*wbv1.ActionSigner) (wbv1.Digest, error) { return "", errors.New("the key was withdrawn") }
	reconcileOnce(t, &refusing, s)
	s = get(t, s)
	if condOf(s.Status.Conditions, wbv1.ConditionValid) != "False/Invalid" || condOf(s.Status.Conditions, wbv1.ConditionStalled) != "True/Invalid" ||
		meta.FindStatusCondition(s.Status.Conditions, wbv1.ConditionValid).Message != "the key was withdrawn" || s.Status.KeyID != "" {
		t.Fatalf("a signer its users refuse: %+v", s.Status)
	}
	s.Spec.Namespaces = []string{"team-a", "team-b"}
	testkit.Must(t, env.Client.Update(ctx, s))
	reconcileOnce(t, r, s)
	if s = get(t, s); condOf(s.Status.Conditions, wbv1.ConditionStalled) != "False/Valid" || s.Status.ObservedGeneration != s.Generation || s.Generation < 2 {
		t.Fatalf("a fixed signer at generation %d: %+v", s.Generation, s.Status)
	}
}
