package nodeagent

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/statusapply"
	"sensorium.dev/workbench/internal/test/samples"
)

// BenchmarkStatusApplyResponse measures what one status apply costs its caller after the
// request (issue 27 item 2): the response the client reads and decodes. Interleaved in one
// run, on a finished TerminalCommand: the unstructured apply statusapply made before (the
// status converted through a map, the response — the whole object with managedFields —
// decoded into Unstructured) and statusapply.Apply (the body built directly, the response
// only the object's metadata). Response bytes are counted at the transport (exact);
// allocated bytes per call are the process's (the manager and agent in this process
// decode the resulting watch events too, the same for both: compare medians).
func BenchmarkStatusApplyResponse(b *testing.B) {
	ctx := context.Background()
	ns := setup(b)
	finishedCommand(ctx, b, ns, "a")
	var read atomic.Int64
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, &read} })
	c, err := client.New(cfg, client.Options{Scheme: env.Scheme})
	must(b, err)
	var cmd wbv1.TerminalCommand
	must(b, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a"}, &cmd))
	type status struct {
		Conditions []metav1.Condition `json:"conditions"`
	}
	next := func(typ, v string) status {
		return status{Conditions: []metav1.Condition{{Type: typ, Status: metav1.ConditionTrue, Reason: "R" + v,
			Message: "benchmark", LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}}}
	}
	before := func(v string) error { // internal/statusapply as of 0b92895
		var st map[string]any
		raw, err := json.Marshal(next("BenchBefore", v))
		if err == nil {
			err = json.Unmarshal(raw, &st)
		}
		if err != nil {
			return err
		}
		u := &unstructured.Unstructured{Object: map[string]any{"apiVersion": wbv1.GroupVersion.String(), "kind": "TerminalCommand",
			"metadata": map[string]any{"name": "a", "namespace": ns}, "status": st}}
		//nolint:staticcheck // the unstructured apply statusapply made before
		return c.Status().Patch(ctx, u, client.Apply, client.FieldOwner("bench-before"), client.ForceOwnership)
	}
	after := func(v string) error {
		_, err := statusapply.Apply(ctx, c, "bench-after", &cmd, nil, next("BenchAfter", v))
		return err
	}
	type figures struct {
		wall        samples.Durations
		resp, alloc []float64
	}
	measure := func(f *figures, call func(string) error, v string) {
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		r0 := read.Load()
		t0 := time.Now()
		must(b, call(v))
		f.wall = append(f.wall, time.Since(t0))
		f.resp = append(f.resp, float64(read.Load()-r0))
		runtime.ReadMemStats(&m1)
		f.alloc = append(f.alloc, float64(m1.TotalAlloc-m0.TotalAlloc))
	}
	var old, now figures
	for i := 0; i < b.N; i++ {
		v := strconv.Itoa(i)
		measure(&old, before, v)
		measure(&now, after, v)
	}
	median := func(x []float64) float64 { s := slices.Clone(x); slices.Sort(s); return s[len(s)/2] }
	old.wall.Report(b, "before-apply")
	now.wall.Report(b, "after-apply")
	b.ReportMetric(median(old.resp), "before-response-bytes")
	b.ReportMetric(median(now.resp), "after-response-bytes")
	b.ReportMetric(median(old.alloc), "before-alloc-bytes")
	b.ReportMetric(median(now.alloc), "after-alloc-bytes")
}

// countingTransport adds the bytes of every response body read to n.
type countingTransport struct {
	rt http.RoundTripper
	n  *atomic.Int64
}

func (t countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	resp, err := t.rt.RoundTrip(r)
	if err == nil {
		resp.Body = countingBody{resp.Body, t.n}
	}
	return resp, err
}

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
