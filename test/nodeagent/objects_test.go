package nodeagent

import (
	"context"
	"testing"

	"sigs.k8s.io/controller-runtime/pkg/client"
)

// get reads object ns/name (ns "" for a cluster-scoped one) into obj through the suite's
// client, failing the test on any error.
func get(t testing.TB, ns, name string, obj client.Object) {
	t.Helper()
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj))
}

// refresh reads obj again, by its own namespace and name, failing the test on any error.
func refresh(t testing.TB, obj client.Object) {
	t.Helper()
	must(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
}
