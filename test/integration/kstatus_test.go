package integration

import (
	"context"
	"fmt"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	kstatus "sigs.k8s.io/cli-utils/pkg/kstatus/status"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// eventuallyKStatus waits (at most 30 s: the manager writes the health conditions with the
// outcome it derives) until kstatus — the health library behind Flux and apply-and-wait
// tools — reads obj, as the API server returns it, as want.
func eventuallyKStatus(t *testing.T, obj client.Object, want kstatus.Status) {
	t.Helper()
	eventually(t, 30*time.Second, fmt.Sprintf("%T %s read %s by kstatus", obj, obj.GetName(), want), func() (bool, string) {
		must(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
		m, err := runtime.DefaultUnstructuredConverter.ToUnstructured(obj)
		must(t, err)
		res, err := kstatus.Compute(&unstructured.Unstructured{Object: m})
		must(t, err)
		return res.Status == want, fmt.Sprintf("%s (%s); status %v", res.Status, res.Message, m["status"])
	})
}
