package skills

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// TestCorrelationFollowsOneID (issue 30 item 5): one correlation id, supplied by the agent,
// followed through a recorded command, the consent request of a command that needs an
// operator, the wait and the probe scoped to the command (inherited, not supplied), the
// Recording's edges (status and stored trace) and its trace Artifact: one label selector
// finds them all, and every recorded edge names it.
func TestCorrelationFollowsOneID(t *testing.T) {
	ctx := context.Background()
	w := newWorld(t)
	w.hostEnvironment("demo", seedDir(t))
	w.session("s", "demo")
	const id = "task-0042"
	labelled := map[string]string{wbv1.CorrelationLabel: id}
	must(t, env.Client.Create(ctx, &wbv1.Recording{ObjectMeta: metav1.ObjectMeta{Name: "rec", Namespace: w.ns, Labels: labelled},
		Spec: wbv1.RecordingSpec{EnvironmentRef: "demo"}}))
	eventually(t, time.Minute, "recording started", func() (bool, string) {
		var r wbv1.Recording
		get(t, w.ns, "rec", &r)
		return r.Status.Phase == wbv1.RecordingPhaseRecording, fmt.Sprintf("%+v", r.Status)
	})

	command := func(name string, argv ...string) {
		must(t, env.Client.Create(ctx, &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: w.ns, Labels: labelled},
			Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "mkdir", Argv: argv, Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: 30}}))
	}
	command("c1", "/bin/mkdir", "build")
	command("ask", "/bin/mkdir", "elsewhere") // not admitted by the profile: put to an operator
	eventually(t, time.Minute, "command c1 succeeded", func() (bool, string) {
		var c wbv1.TerminalCommand
		get(t, w.ns, "c1", &c)
		return wbv1.CommandPhaseFor(c.Status.Conditions) == wbv1.CommandSucceeded, fmt.Sprintf("%+v", c.Status)
	})
	scope := wbv1.Scope{CommandRef: ptr(wbv1.ObjectName("c1"))}
	must(t, env.Client.Create(ctx, &wbv1.Wait{ObjectMeta: metav1.ObjectMeta{Name: "w1", Namespace: w.ns}, Spec: wbv1.WaitSpec{
		Scope: &scope, Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKindCommandDone}, DeadlineSeconds: 30}}))
	must(t, env.Client.Create(ctx, &wbv1.Probe{ObjectMeta: metav1.ObjectMeta{Name: "p1", Namespace: w.ns}, Spec: wbv1.ProbeSpec{
		Scope: &scope, Condition: wbv1.WaitCondition{Kind: wbv1.ConditionKindCommandDone}, TimeoutSeconds: 5}}))
	eventually(t, time.Minute, "command, wait and probe recorded with the id", func() (bool, string) {
		var r wbv1.Recording
		get(t, w.ns, "rec", &r)
		seen := map[string]string{}
		for _, e := range r.Status.RecentEdges {
			seen[string(e.Object)] = e.CorrelationID
		}
		return seen["c1"] == id && seen["w1"] == id && seen["p1"] == id, fmt.Sprintf("edges %v", seen)
	})
	rec, err := w.c.StopRecording(ctx, "rec")
	must(t, err)
	trace, err := w.nodeTrace(ctx, string(rec.Status.TraceArtifactRef))
	must(t, err)
	if n := strings.Count(string(trace), `"correlation_id":"`+id+`"`); n < 3 {
		t.Fatalf("the stored trace names the id on %d edges, want the command, wait and probe: %s", n, trace)
	}

	sel := client.MatchingLabels{wbv1.CorrelationLabel: id}
	for _, k := range []struct {
		list client.ObjectList
		want []string
	}{
		{&wbv1.TerminalCommandList{}, []string{"ask", "c1"}},
		{&wbv1.ConsentRequestList{}, []string{"ask-consent"}},
		{&wbv1.WaitList{}, []string{"w1"}},
		{&wbv1.ProbeList{}, []string{"p1"}},
		{&wbv1.RecordingList{}, []string{"rec"}},
		{&wbv1.ArtifactList{}, []string{string(rec.Status.TraceArtifactRef)}},
	} {
		eventually(t, 30*time.Second, fmt.Sprintf("%T selected by the id", k.list), func() (bool, string) {
			must(t, env.Client.List(ctx, k.list, client.InNamespace(w.ns), sel))
			var names []string
			items, err := meta.ExtractList(k.list)
			must(t, err)
			for _, o := range items {
				names = append(names, o.(client.Object).GetName())
			}
			return fmt.Sprint(names) == fmt.Sprint(k.want), fmt.Sprintf("%v, want %v", names, k.want)
		})
	}
}
