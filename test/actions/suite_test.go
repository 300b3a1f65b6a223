// Package actions exercises signed action catalogs (seed 002) through a real kube-apiserver
// with the real CRDs, webhook configurations and the manager's controllers: admission of
// catalogs and runs, signature authorization, signer scope, posture.
package actions

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrl "sigs.k8s.io/controller-runtime"

	"sensorium.dev/workbench/controllers"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/webhooks"
)

var env *envtest.Env

func TestMain(m *testing.M) {
	var err error
	env, err = envtest.Start(envtest.Options{Setup: func(mgr ctrl.Manager) error {
		if err := controllers.SetupWithManager(mgr, controllers.Config{ConsentTimeoutSeconds: 10, BindingRecheck: 2 * time.Second}); err != nil {
			return err
		}
		return webhooks.SetupWithManager(mgr)
	}})
	if err == envtest.ErrNoAssets {
		fmt.Fprintln(os.Stderr, "SKIP actions suite:", err)
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting control plane:", err)
		os.Exit(1)
	}
	code := m.Run()
	env.Stop()
	os.Exit(code)
}

// namespace creates a fresh namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "wb-act-"}}
	if err := env.Client.Create(context.Background(), ns); err != nil {
		t.Fatalf("creating namespace: %v", err)
	}
	return ns.Name
}

// eventually polls cond until it holds or the deadline passes, then fails saying what it
// waited for and what it last saw.
func eventually(t *testing.T, timeout time.Duration, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		ok, seen := cond()
		if ok {
			return
		}
		last = seen
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last saw: %s", timeout, what, last)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
