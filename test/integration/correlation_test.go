package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// TestCorrelationThreadsCommand: a command created without a correlation id gets one; a
// supplied one is kept; the command's ConsentRequest and a Wait scoped to the command carry
// it, so one label selector finds what the command caused (issue 30 item 5).
func TestCorrelationThreadsCommand(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")

	must(t, env.Client.Create(ctx, command(ns, "gen", "/usr/bin/git", "--no-pager", "status")))
	generated := getCommand(t, ns, "gen").Labels[wbv1.CorrelationLabel]
	if !strings.HasPrefix(generated, "wb-") {
		t.Fatalf("a command without a correlation id must be given one, labels %v", getCommand(t, ns, "gen").Labels)
	}

	const id = "story009-001"
	c := command(ns, "asks", "/usr/bin/git", "--no-pager", "cherry")
	c.Labels = map[string]string{wbv1.CorrelationLabel: id}
	must(t, env.Client.Create(ctx, c))
	if got := getCommand(t, ns, "asks").Labels[wbv1.CorrelationLabel]; got != id {
		t.Fatalf("a supplied correlation id must be kept, got %q", got)
	}
	waitCommandPhase(t, ns, "asks", wbv1.CommandAwaitingConsent)
	w := &wbv1.Wait{ObjectMeta: metav1.ObjectMeta{Name: "w", Namespace: ns}, Spec: wbv1.WaitSpec{
		Scope:     &wbv1.Scope{CommandRef: ptr(wbv1.ObjectName("asks"))},
		Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKindCommandDone}, DeadlineSeconds: 30}}
	must(t, env.Client.Create(ctx, w))
	eventually(t, 20*time.Second, "request and wait labelled with the command's correlation id", func() (bool, string) {
		var crs wbv1.ConsentRequestList
		must(t, env.Client.List(ctx, &crs, client.InNamespace(ns), client.MatchingLabels{wbv1.CorrelationLabel: id}))
		var ws wbv1.WaitList
		must(t, env.Client.List(ctx, &ws, client.InNamespace(ns), client.MatchingLabels{wbv1.CorrelationLabel: id}))
		return len(crs.Items) == 1 && crs.Items[0].Name == "asks-consent" && len(ws.Items) == 1 && ws.Items[0].Name == "w",
			fmt.Sprintf("requests %d waits %d", len(crs.Items), len(ws.Items))
	})
}
