package aggregated

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// BenchmarkViewRevocation measures revocation convergence: for each of 50 revocations, an
// observer streams a view through kube-apiserver and workbench-apiserver; the granter sets
// revoked; the time from the API server's answer to the update until the observer reads
// the stream's "closed" line (view-grant-revoked), after which nothing more is delivered.
// The floor, measured in the same run, is one GET of the grant through kube-apiserver.
//
//	go test ./test/aggregated -run '^$' -bench BenchmarkViewRevocation -benchtime 1x
func BenchmarkViewRevocation(b *testing.B) {
	const revocations = 50
	ctx := context.Background()
	ns := namespace(b)
	op := viewedSession(b, ns)
	must(b, op.Create(ctx, terminalView(ns, "v", "s", "test")))
	obs := observerUser(b, ns, "watcher")
	for n := 0; n < b.N; n++ {
		var conv, floor []time.Duration
		for i := 0; i < revocations; i++ {
			name := fmt.Sprintf("g-%d-%d", n, i)
			grant(b, op, ns, name, "v", wbv1.ViewSubject{Kind: wbv1.ViewSubjectUser, Name: "watcher"}, time.Hour)
			o := watchView(b, obs, ns, "v")
			o.waitScreen("the first frame", "manifest-test>", 30*time.Second)
			t0 := time.Now()
			var g wbv1.ViewGrant
			must(b, op.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &g))
			floor = append(floor, time.Since(t0))
			revokedAt := revoke(b, op, ns, name)
			if code := o.waitFinal("the stream closes", 10*time.Second); code != string(actuation.CodeViewGrantRevoked) {
				b.Fatalf("revocation %d: stream ended with %q", i, code)
			}
			frames, _, _ := o.snapshot()
			last := frames[len(frames)-1]
			if last.Type != "closed" {
				b.Fatalf("revocation %d: the last line is %q", i, last.Type)
			}
			conv = append(conv, last.At.Sub(revokedAt))
			o.stop()
		}
		slices.Sort(conv)
		slices.Sort(floor)
		p50, maxc, f50 := conv[len(conv)/2], conv[len(conv)-1], floor[len(floor)/2]
		b.ReportMetric(float64(p50.Microseconds())/1000, "p50-ms")
		b.ReportMetric(float64(maxc.Microseconds())/1000, "max-ms")
		b.ReportMetric(float64(f50.Microseconds())/1000, "floor-get-p50-ms")
		b.ReportMetric(float64(p50)/float64(f50), "p50/floor")
		b.Logf("%d revocations: convergence p50 %s max %s; floor (GET of the grant) p50 %s", revocations, p50, maxc, f50)
	}
}
