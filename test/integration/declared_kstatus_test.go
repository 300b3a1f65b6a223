package integration

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/util/retry"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/skills"
	"sensorium.dev/workbench/internal/skillsapi"

	"sensorium.dev/workbench/internal/test/kstate"
)

// TestDeclaredKindsKStatus: the declared kinds nothing else realizes — ActionSigner,
// BundleSigner, Skill, WorkbenchPolicy — get status.observedGeneration and the kstatus
// conditions from the manager (issue 30 item 7): Current once checked the way their users
// read them, Failed when their users would refuse them ("*" mixed with names, a skill
// manifest that does not validate; a key that does not parse is refused at admission),
// InProgress for a new generation until it is checked again.
func TestDeclaredKindsKStatus(t *testing.T) {
	ctx := context.Background()
	suffix := strings.TrimPrefix(namespace(t), "wb-")
	key := base64.StdEncoding.EncodeToString(make([]byte, 32))
	keyID := fmt.Sprintf("sha256:%x", sha256.Sum256(make([]byte, 32)))
	create := func(obj client.Object) {
		t.Helper()
		must(t, env.Client.Create(ctx, obj))
		t.Cleanup(func() { _ = env.Client.Delete(context.Background(), obj) })
	}

	signer := &wbv1.ActionSigner{ObjectMeta: metav1.ObjectMeta{Name: "as-" + suffix}, Spec: wbv1.ActionSignerSpec{
		PublicKey: key, Namespaces: []string{"team-a"}, Classes: []wbv1.ActionClass{"C1"}}}
	create(signer)
	eventuallyObserved(t, signer, kstatus.CurrentStatus)
	if signer.Status.ObservedGeneration != signer.Generation || string(signer.Status.KeyID) != keyID {
		t.Fatalf("ActionSigner status %+v, want generation %d and key id %s", signer.Status, signer.Generation, keyID)
	}
	// A wildcard mixed with names is what no user of the signer reads as intended.
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(signer), signer))
		signer.Spec.Namespaces = []string{"*", "team-a"}
		return env.Client.Update(ctx, signer)
	}))
	if res := kstatusOf(t, signer); res.Status != kstatus.InProgressStatus {
		t.Fatalf("a new generation not yet checked reads %s (%s), want InProgress", res.Status, res.Message)
	}
	eventuallyObserved(t, signer, kstatus.FailedStatus)
	bs := &wbv1.BundleSigner{ObjectMeta: metav1.ObjectMeta{Name: "bs-" + suffix}, Spec: wbv1.BundleSignerSpec{
		PublicKey: key, Namespaces: []string{"*"}}}
	create(bs)
	eventuallyObserved(t, bs, kstatus.CurrentStatus)
	if string(bs.Status.KeyID) != keyID {
		t.Fatalf("BundleSigner key id %q, want %s", bs.Status.KeyID, keyID)
	}
	bsBad := &wbv1.BundleSigner{ObjectMeta: metav1.ObjectMeta{Name: "bs-bad-" + suffix}, Spec: wbv1.BundleSignerSpec{
		PublicKey: key, Namespaces: []string{"team-a", "*"}}}
	create(bsBad)
	eventuallyObserved(t, bsBad, kstatus.FailedStatus)

	raw, err := os.ReadFile("../fixtures/skills/data/valid-skill-bundle.v0.json")
	must(t, err)
	b, err := skills.Import(raw)
	must(t, err)
	spec, err := skillsapi.SkillSpec(&b.Manifest)
	must(t, err)
	ns := namespace(t)
	sk := &wbv1.Skill{ObjectMeta: metav1.ObjectMeta{Name: "sk", Namespace: ns}, Spec: spec}
	create(sk)
	eventuallyObserved(t, sk, kstatus.CurrentStatus)
	broken := &wbv1.Skill{ObjectMeta: metav1.ObjectMeta{Name: "sk-broken", Namespace: ns}, Spec: *spec.DeepCopy()}
	broken.Spec.Steps[0].Index = 7
	create(broken)
	eventuallyObserved(t, broken, kstatus.FailedStatus)

	// The singleton policy: other tests may hold it; create the default one when absent.
	pol := &wbv1.WorkbenchPolicy{}
	if err := env.Client.Get(ctx, client.ObjectKey{Name: wbv1.WorkbenchPolicyName}, pol); apierrors.IsNotFound(err) {
		pol = &wbv1.WorkbenchPolicy{ObjectMeta: metav1.ObjectMeta{Name: wbv1.WorkbenchPolicyName}}
		if err := env.Client.Create(ctx, pol); err == nil {
			t.Cleanup(func() { _ = env.Client.Delete(context.Background(), pol) })
		} else if !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	} else {
		must(t, err)
	}
	pol.SetName(wbv1.WorkbenchPolicyName)
	eventually(t, 30*time.Second, "WorkbenchPolicy observed", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKey{Name: wbv1.WorkbenchPolicyName}, pol))
		res := kstatusOf(t, pol)
		return res.Status == kstatus.CurrentStatus && pol.Status.ObservedGeneration == pol.Generation, fmt.Sprintf("%s %+v", res.Status, pol.Status)
	})
}

// eventuallyObserved waits until the manager observed obj's current generation
// (status.observedGeneration) and kstatus reads it as want: an object whose status nothing
// wrote reads Current by kstatus's own rule, so the generation is what proves the check.
func eventuallyObserved(t *testing.T, obj client.Object, want kstatus.Status) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%T %s observed and read %s by kstatus", obj, obj.GetName(), want), func() (bool, string) {
		must(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
		res, m := kstate.ReadKStatus(t, obj)
		og, _, _ := unstructured.NestedInt64(m, "status", "observedGeneration")
		return og == obj.GetGeneration() && res.Status == want, fmt.Sprintf("%s (%s); status %v", res.Status, res.Message, m["status"])
	})
}
