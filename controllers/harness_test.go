package controllers

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"sensorium.dev/workbench/internal/test/testkit"
)

// The reconcilers list by field indexes (grants by request, commands by idempotency key),
// which only the manager's informer cache serves. cached is a manager on the envtest API
// server whose controllers are registered (so their indexes are) but never started: only its
// cache runs, and its client (cache reads, direct writes) is what the reconcilers under test
// get, as in cmd/manager. A test calls Reconcile itself after synced saw its objects.
var cached struct {
	once   sync.Once
	err    error
	mgr    ctrl.Manager
	client client.Client
}

func cachedClient(t *testing.T) client.Client {
	t.Helper()
	cached.once.Do(func() {
		mgr, err := ctrl.NewManager(env.Config, ctrl.Options{Scheme: env.Scheme, Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0"})
		if err != nil {
			cached.err = err
			return
		}
		// The reconcilers' own SetupWithManager register the indexes they list by.
		for _, s := range []interface{ SetupWithManager(ctrl.Manager) error }{&TerminalCommandReconciler{}, &ConsentRequestReconciler{}} {
			if err := s.SetupWithManager(mgr); err != nil {
				cached.err = err
				return
			}
		}
		go func() { _ = mgr.GetCache().Start(context.Background()) }()
		if !mgr.GetCache().WaitForCacheSync(context.Background()) {
			cached.err = fmt.Errorf("the test cache did not sync")
			return
		}
		cached.mgr, cached.client = mgr, mgr.GetClient()
	})
	testkit.Must(t, cached.err)
	return cached.client
}

func recorder(t *testing.T, name string) events.EventRecorder {
	cachedClient(t)
	return cached.mgr.GetEventRecorder(name)
}

// synced waits (at most 10 s) until the cache holds each object at least at the version
// the API server returned for it, so a
// Reconcile that reads through the cache sees what the test wrote.
func synced(t *testing.T, objs ...client.Object) {
	t.Helper()
	c := cachedClient(t)
	for _, o := range objs {
		want := o.GetResourceVersion()
		testkit.Eventually(t, 10*time.Second, fmt.Sprintf("cache holds %T %s at %s", o, o.GetName(), want), func() (bool, string) {
			got := o.DeepCopyObject().(client.Object)
			if err := c.Get(context.Background(), client.ObjectKeyFromObject(o), got); err != nil {
				return false, err.Error()
			}
			have, _ := strconv.ParseUint(got.GetResourceVersion(), 10, 64)
			need, _ := strconv.ParseUint(want, 10, 64)
			return have >= need, got.GetResourceVersion()
		})
	}
}

// fixedClock is a settable clock for the reconcilers' Now.
type fixedClock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *fixedClock { return &fixedClock{t: time.Now()} }

func (c *fixedClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fixedClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func reqOf(obj client.Object) ctrl.Request {
	return ctrl.Request{NamespacedName: client.ObjectKeyFromObject(obj)}
}
