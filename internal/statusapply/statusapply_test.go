package statusapply_test

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/statusapply"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/testkit"
	"sensorium.dev/workbench/webhooks"
)

// The tests apply statuses against a real API server (envtest) with the admission
// webhooks served and no controller started: the only status writer is the test.
var env *envtest.Env

func TestMain(m *testing.M) {
	envtest.Main(m, "statusapply", envtest.Options{Setup: webhooks.SetupWithManager}, &env)
}

type owned struct {
	Conditions []metav1.Condition `json:"conditions"`
}

func cond(reason string) owned {
	return owned{Conditions: []metav1.Condition{{Type: "StatusApplyTest", Status: metav1.ConditionTrue, Reason: reason,
		Message: "test", LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}}}
}

// TestApplyWritesOwnedFieldsOnly: Apply writes the owned status fields under its field
// manager and leaves the caller's object as it was (the response is not decoded into it);
// equal projections write nothing; ApplyIfUnchanged holds the write to the object's
// resourceVersion (a stale read gets a Conflict, a fresh one writes).
func TestApplyWritesOwnedFieldsOnly(t *testing.T) {
	ctx := context.Background()
	p := gitProfile(t)
	before := p.DeepCopy()
	get := func() *wbv1.CommandProfile {
		var got wbv1.CommandProfile
		testkit.Must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(p), &got))
		return &got
	}

	wrote, err := statusapply.Apply(ctx, env.Client, "statusapply-test", p, owned{}, cond("First"))
	if err != nil || !wrote {
		t.Fatalf("Apply: wrote=%v err=%v", wrote, err)
	}
	if p.ResourceVersion != before.ResourceVersion || len(p.ManagedFields) != len(before.ManagedFields) || len(p.Status.Conditions) != 0 {
		t.Errorf("Apply changed the caller's object: resourceVersion %s -> %s, status %+v", before.ResourceVersion, p.ResourceVersion, p.Status)
	}
	got := get()
	if c := meta.FindStatusCondition(got.Status.Conditions, "StatusApplyTest"); c == nil || c.Reason != "First" {
		t.Fatalf("stored status after Apply: %+v", got.Status.Conditions)
	}
	var managers []string
	for _, mf := range got.ManagedFields {
		if mf.Subresource == "status" {
			managers = append(managers, mf.Manager)
		}
	}
	if len(managers) != 1 || managers[0] != "statusapply-test" {
		t.Errorf("status field managers %v, want only statusapply-test", managers)
	}

	if wrote, err := statusapply.Apply(ctx, env.Client, "statusapply-test", got, cond("First"), cond("First")); err != nil || wrote {
		t.Errorf("Apply of an unchanged projection: wrote=%v err=%v", wrote, err)
	}
	if again := get(); again.ResourceVersion != got.ResourceVersion {
		t.Errorf("an unchanged projection was written: resourceVersion %s -> %s", got.ResourceVersion, again.ResourceVersion)
	}

	// p was read before the first write: its resourceVersion is stale.
	if _, err := statusapply.ApplyIfUnchanged(ctx, env.Client, "statusapply-test", p, owned{}, cond("Stale")); !apierrors.IsConflict(err) {
		t.Errorf("ApplyIfUnchanged from a stale read: %v, want a Conflict", err)
	}
	if wrote, err := statusapply.ApplyIfUnchanged(ctx, env.Client, "statusapply-test", got, cond("First"), cond("Second")); err != nil || !wrote {
		t.Fatalf("ApplyIfUnchanged from a fresh read: wrote=%v err=%v", wrote, err)
	}
	if c := meta.FindStatusCondition(get().Status.Conditions, "StatusApplyTest"); c == nil || c.Reason != "Second" {
		t.Errorf("stored status after ApplyIfUnchanged: %+v", c)
	}
}

func condAt(at time.Time) owned {
	c := cond("First")
	c.Conditions[0].LastTransitionTime = metav1.NewTime(at)
	return c
}

// TestApplySkipsWhatStoresTheSame: a projection that differs from the stored one only below
// what the API server stores (a time's sub-second part: metav1.Time is stored in whole
// seconds) writes nothing — before, it was sent, and the server stored a new version whose
// only change was the field manager's timestamp (a watch event and an etcd revision).
func TestApplySkipsWhatStoresTheSame(t *testing.T) {
	ctx := context.Background()
	p := gitProfile(t)
	at := time.Date(2026, 12, 6, 12, 0, 0, 123456789, time.UTC)
	stored, fresh := condAt(at.Truncate(time.Second)), condAt(at) // as read back; as computed in process
	if wrote, err := statusapply.Apply(ctx, env.Client, "statusapply-test", p, stored, fresh); err != nil || wrote {
		t.Fatalf("Apply of a projection equal as stored: wrote=%v err=%v, want no write", wrote, err)
	}
	if wrote, err := statusapply.Apply(ctx, env.Client, "statusapply-test", p, stored, condAt(at.Add(time.Second))); err != nil || !wrote {
		t.Fatalf("Apply of a changed projection: wrote=%v err=%v, want a write", wrote, err)
	}
}

// gitProfile creates a CommandProfile in a namespace of its own (the object both tests apply
// status to).
func gitProfile(t *testing.T) *wbv1.CommandProfile {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "statusapply-"}}
	testkit.Must(t, env.Client.Create(ctx, ns))
	p := &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "git", Namespace: ns.Name},
		Spec: wbv1.CommandProfileSpec{Executable: "/usr/bin/git", AllowedRoots: []string{"repo"}}}
	testkit.Must(t, env.Client.Create(ctx, p))
	return p
}
