package nodeagent

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// TestNodeDecisionTravelsWithStartOrOutcome watches every version of commands the node
// admits (issue 27): the node's decision is never a write of its own — every version that
// shows an Admitted condition also shows the node's Started=True (a command still running
// past the coalescing window) or its outcome, and no version shows the manager writing any
// status of it (the manager never decides a command bound to a node with an agent). A
// short command's whole status is one write in the common case; the count of status
// versions is logged, not asserted (a loaded machine may split it into Running, then the
// outcome). Before issue 27 the node's claim (Admitted, Started=False StartingAtNode) was
// a version of its own.
func TestNodeDecisionTravelsWithStartOrOutcome(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/echo", nil, []string{"hello"})))
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	must(t, err)
	w, err := wc.Watch(ctx, &wbv1.TerminalCommandList{}, client.InNamespace(ns))
	must(t, err)
	defer w.Stop()
	const n = 5
	for i := 0; i < n; i++ {
		must(t, env.Client.Create(ctx, command(ns, "d"+string(rune('a'+i)), "/bin/echo", "hello")))
	}
	final, statusVersions := map[string]bool{}, map[string]int{}
	deadline := time.After(60 * time.Second)
	for len(final) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed")
			}
			if ev.Type != watch.Added && ev.Type != watch.Modified {
				continue
			}
			c := ev.Object.(*wbv1.TerminalCommand)
			if ms := managersOfStatus(c); ms["workbench-manager/terminalcommand"] {
				t.Fatalf("%s: the manager wrote status of a command bound to a node with an agent: %v", c.Name, ms)
			}
			adm := meta.FindStatusCondition(c.Status.Conditions, wbv1.ConditionAdmitted)
			if adm == nil {
				continue
			}
			statusVersions[c.Name]++
			started := meta.FindStatusCondition(c.Status.Conditions, wbv1.ConditionStarted)
			if adm.Status != metav1.ConditionTrue || c.Status.DecidedBy != wbv1.PhaseWriterNode {
				t.Fatalf("%s: decided by %q, Admitted %+v: want the node's admission", c.Name, c.Status.DecidedBy, adm)
			}
			if (started == nil || started.Status != metav1.ConditionTrue) && !wbv1.CommandIsFinal(c.Status.Conditions) {
				t.Fatalf("%s: a version with the node's decision but neither a start nor an outcome: %+v", c.Name, c.Status)
			}
			if c.Status.Phase != wbv1.CommandPhaseFor(c.Status.Conditions) {
				t.Fatalf("%s: phase %s trails its conditions (%s)", c.Name, c.Status.Phase, wbv1.CommandPhaseFor(c.Status.Conditions))
			}
			if wbv1.CommandIsFinal(c.Status.Conditions) {
				if c.Status.Phase != wbv1.CommandSucceeded {
					t.Fatalf("%s: %+v", c.Name, c.Status)
				}
				final[c.Name] = true
			}
		case <-deadline:
			t.Fatalf("%d of %d commands reached their outcome; status versions %v", len(final), n, statusVersions)
		}
	}
	t.Logf("status versions per command (decision, start and outcome together = 1): %v", statusVersions)
}

// managersOfStatus returns the field managers holding any status field of c.
func managersOfStatus(c *wbv1.TerminalCommand) map[string]bool {
	out := map[string]bool{}
	for _, mf := range c.ManagedFields {
		if mf.Subresource == "status" {
			out[mf.Manager] = true
		}
	}
	return out
}
