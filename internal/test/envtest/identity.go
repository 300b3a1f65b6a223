package envtest

import (
	"context"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// BoundAs binds the ClusterRole role to user in namespace ("" cluster-wide), waits until
// the binding is in effect, and returns a client acting as user. A failure fails the test.
func (e *Env) BoundAs(t testing.TB, role, user, namespace string) client.Client {
	t.Helper()
	if err := e.Bind(context.Background(), role, user, namespace); err != nil {
		t.Fatalf("binding %s to %s: %v", role, user, err)
	}
	c, err := e.As(user)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ConsentGrant is an operator's answer with scope to ConsentRequest ns/request.
func ConsentGrant(ns, name, request string, scope wbv1.ConsentScope) *wbv1.ConsentGrant {
	return &wbv1.ConsentGrant{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: wbv1.ConsentGrantSpec{RequestRef: wbv1.ObjectName(request), Scope: scope}}
}
