package main

import (
	"context"
	"os"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// startAPIServer starts a real API server (etcd + kube-apiserver) for one test and stops
// it when the test ends; it skips, saying why, when the control plane binaries are not
// there.
func startAPIServer(t *testing.T) *rest.Config {
	t.Helper()
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: run make test (hack/build-control-plane.sh builds the API server)")
	}
	env := &envtest.Environment{ControlPlaneStartTimeout: 2 * time.Minute} // several control planes start at once under go test ./...
	cfg, err := env.Start()
	if err != nil {
		t.Fatalf("starting the API server: %v", err)
	}
	t.Cleanup(func() { _ = env.Stop() })
	return cfg
}

// runManager starts mgr until the test ends; a manager that ends with an error fails the
// test. The returned channel is closed when the manager has returned.
func runManager(ctx context.Context, t *testing.T, mgr ctrl.Manager) <-chan struct{} {
	t.Helper()
	mctx, stop := context.WithCancel(ctx)
	ended := make(chan struct{})
	var err error
	go func() {
		err = mgr.Start(mctx)
		close(ended)
	}()
	t.Cleanup(func() {
		stop()
		<-ended
		if err != nil {
			t.Errorf("the manager ended with an error: %v", err)
		}
	})
	return ended
}
