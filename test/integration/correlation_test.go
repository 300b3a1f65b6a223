package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
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

// TestCorrelationClientArtifact: an Artifact a client creates without a correlation id gets
// one: the id of the command it names as its owner when that command exists, a generated
// one otherwise; a supplied id is kept (issue 30 item 5).
func TestCorrelationClientArtifact(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	placedSetup(t, ns, "node-a")
	const id = "story-artifact-001"
	c := command(ns, "c", "/usr/bin/git", "--no-pager", "status")
	c.Labels = map[string]string{wbv1.CorrelationLabel: id}
	must(t, env.Client.Create(ctx, c))
	c = getCommand(t, ns, "c")

	artifact := func(name string, labels map[string]string, owners ...metav1.OwnerReference) string {
		t.Helper()
		a := &wbv1.Artifact{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: labels, OwnerReferences: owners},
			Spec: wbv1.ArtifactSpec{EnvironmentRef: "e", Source: "export", Root: ptr(wbv1.RootName("repo")), Path: ptr(wbv1.RelativePath("out"))}}
		must(t, env.Client.Create(ctx, a))
		var got wbv1.Artifact
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &got))
		return got.Labels[wbv1.CorrelationLabel]
	}
	owner := func(kind, name string, uid string, controller bool) metav1.OwnerReference {
		return metav1.OwnerReference{APIVersion: wbv1.GroupVersion.String(), Kind: kind, Name: name, UID: types.UID(uid), Controller: ptr(controller)}
	}

	if got := artifact("plain", nil); !strings.HasPrefix(got, "wb-") {
		t.Fatalf("an Artifact created without a correlation id must be given one, got %q", got)
	}
	if got := artifact("other-labels", map[string]string{"team": "a"}); !strings.HasPrefix(got, "wb-") {
		t.Fatalf("an Artifact with other labels must be given a correlation id, got %q", got)
	}
	if got := artifact("of-command", nil, owner("TerminalCommand", "c", string(c.UID), true)); got != id {
		t.Fatalf("an Artifact owned by command c must inherit its correlation id %q, got %q", id, got)
	}
	if got := artifact("of-gone", nil, owner("TerminalCommand", "gone", "00000000-0000-0000-0000-000000000001", true),
		owner("TerminalCommand", "c", string(c.UID), false)); got != id {
		t.Fatalf("an Artifact whose controller is gone inherits from its other source, want %q, got %q", id, got)
	}
	if got := artifact("of-missing", nil, owner("TerminalCommand", "missing", "00000000-0000-0000-0000-000000000002", true)); !strings.HasPrefix(got, "wb-") {
		t.Fatalf("an Artifact naming a command that does not exist must get a generated id, got %q", got)
	}
	if got := artifact("supplied", map[string]string{wbv1.CorrelationLabel: "mine"}, owner("TerminalCommand", "c", string(c.UID), true)); got != "mine" {
		t.Fatalf("a supplied correlation id must be kept, got %q", got)
	}
	// Bounded: only the first four sources are read; a fifth naming the command is not.
	var many []metav1.OwnerReference
	for i := range 4 {
		many = append(many, owner("TerminalCommand", fmt.Sprintf("missing-%d", i), fmt.Sprintf("00000000-0000-0000-0000-00000000001%d", i), false))
	}
	if got := artifact("many", nil, append(many, owner("TerminalCommand", "c", string(c.UID), false))...); !strings.HasPrefix(got, "wb-") {
		t.Fatalf("an Artifact's sources past the fourth must not be read, got %q", got)
	}
	var as wbv1.ArtifactList
	must(t, env.Client.List(ctx, &as, client.InNamespace(ns), client.MatchingLabels{wbv1.CorrelationLabel: id}))
	if len(as.Items) != 2 {
		t.Fatalf("the command's correlation id selects %d Artifacts, want 2 (of-command, of-gone)", len(as.Items))
	}
}
