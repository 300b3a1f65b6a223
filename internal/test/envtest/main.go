package envtest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Main is the whole TestMain of a suite that needs only the control plane (and the manager
// opts.Setup registers): it starts it, stores it in *env, runs the tests, stops it and
// exits. Without KUBEBUILDER_ASSETS the suite is skipped, saying so.
func Main(m *testing.M, suite string, opts Options, env **Env) {
	e, err := Start(opts)
	if errors.Is(err, ErrNoAssets) {
		fmt.Fprintf(os.Stderr, "SKIP %s suite: %v\n", suite, err)
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s suite: starting control plane: %v\n", suite, err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	e.Stop()
	os.Exit(code)
}

// Namespace creates a fresh namespace named prefix plus a generated suffix.
func (e *Env) Namespace(t testing.TB, prefix string) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: prefix}}
	if err := e.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace %s*: %v", prefix, err)
	}
	return ns.Name
}
