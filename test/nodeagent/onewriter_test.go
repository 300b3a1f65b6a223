package nodeagent

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// TestCommandDecisionHasOneWriter watches every version of a TerminalCommand, from its
// create to its outcome, and reads metadata.managedFields of each: status.phase and the
// Admitted condition must have exactly one field manager over the command's whole life —
// the node agent for a command it admitted itself, the manager for one held for consent
// (then granted and run by the node) and for one the gate refused — and that manager must
// be the one status.decidedBy names. Before issue 26 the manager adopted the node's
// admission (Admitted by the manager, phase by the node) and the node took over the phase
// of a command the manager admitted.
func TestCommandDecisionHasOneWriter(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/echo", nil, []string{"hello"})))
	must(t, env.Bind(ctx, "workbench-operator", "one-writer-operator", ns))
	op, err := env.As("one-writer-operator")
	must(t, err)
	wc, err := client.NewWithWatch(env.Config, client.Options{Scheme: env.Client.Scheme()})
	must(t, err)

	for _, tc := range []struct {
		name    string
		argv    []string
		decider wbv1.PhaseWriter
		phase   wbv1.CommandPhase
		grant   wbv1.ConsentScope // answer the consent request with this
	}{
		{"admitted", []string{"/bin/echo", "hello"}, wbv1.PhaseWriterNode, wbv1.CommandSucceeded, ""},
		{"consent", []string{"/bin/echo", "other"}, wbv1.PhaseWriterManager, wbv1.CommandSucceeded, wbv1.ConsentAllowOnce},
		{"refused", []string{"/bin/cat", "x"}, wbv1.PhaseWriterManager, wbv1.CommandRefused, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "one-" + tc.name
			w, err := wc.Watch(ctx, &wbv1.TerminalCommandList{}, client.InNamespace(ns), client.MatchingFields{"metadata.name": name})
			must(t, err)
			defer w.Stop()
			must(t, env.Client.Create(ctx, command(ns, name, tc.argv...)))
			phaseBy, admittedBy := map[string]int{}, map[string]int{}
			versions, granted := 0, false
			var last *wbv1.TerminalCommand
			deadline := time.After(60 * time.Second)
			for last == nil || !wbv1.CommandIsFinal(last.Status.Conditions) || last.Status.Phase != wbv1.CommandPhaseFor(last.Status.Conditions) {
				select {
				case ev, ok := <-w.ResultChan():
					if !ok {
						t.Fatalf("watch closed after %d versions", versions)
					}
					if ev.Type != watch.Added && ev.Type != watch.Modified {
						continue
					}
					c := ev.Object.(*wbv1.TerminalCommand)
					versions++
					for m := range owners(t, c, "f:phase") {
						phaseBy[m]++
					}
					for m := range owners(t, c, "f:conditions", `k:{"type":"Admitted"}`) {
						admittedBy[m]++
					}
					if tc.grant != "" && !granted && c.Status.ConsentRequestRef != "" {
						granted = true
						must(t, op.Create(ctx, &wbv1.ConsentGrant{ObjectMeta: metav1.ObjectMeta{Name: name + "-grant", Namespace: ns},
							Spec: wbv1.ConsentGrantSpec{RequestRef: wbv1.ObjectName(c.Status.ConsentRequestRef), Scope: tc.grant}}))
					}
					last = c
				case <-deadline:
					t.Fatalf("no outcome with its phase after %d versions; last %+v", versions, last)
				}
			}
			if last.Status.Phase != tc.phase {
				t.Fatalf("phase %s (%+v), want %s", last.Status.Phase, last.Status, tc.phase)
			}
			if tc.name == "refused" && (last.Status.Refusal == nil || last.Status.Refusal.Code != string(actuation.CodeArgvNotAdmitted)) {
				t.Fatalf("refusal %+v", last.Status.Refusal)
			}
			if last.Status.DecidedBy != tc.decider {
				t.Fatalf("decidedBy %q, want %q", last.Status.DecidedBy, tc.decider)
			}
			all := map[string]bool{}
			for m := range phaseBy {
				all[m] = true
			}
			for m := range admittedBy {
				all[m] = true
			}
			if len(phaseBy) != 1 || len(admittedBy) != 1 || len(all) != 1 {
				t.Fatalf("over %d versions status.phase was managed by %v and the Admitted condition by %v: want one field manager", versions, phaseBy, admittedBy)
			}
			for m := range all {
				if want := map[wbv1.PhaseWriter]string{wbv1.PhaseWriterNode: "node", wbv1.PhaseWriterManager: "manager"}[tc.decider]; !strings.Contains(m, want) {
					t.Fatalf("the one field manager is %q, decidedBy says %s", m, tc.decider)
				}
			}
			t.Logf("%s: %d versions, phase and Admitted managed by %v only", tc.name, versions, sortedKeys(all))
		})
	}
}

// owners returns the field managers of c whose managed status fields hold path (under
// f:status).
func owners(t *testing.T, c *wbv1.TerminalCommand, path ...string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	for _, mf := range c.ManagedFields {
		if mf.Subresource != "status" || mf.FieldsV1 == nil {
			continue
		}
		var tree map[string]any
		if err := json.Unmarshal(mf.FieldsV1.GetRawBytes(), &tree); err != nil {
			t.Fatalf("managedFields of %s: %v", mf.Manager, err)
		}
		node, ok := tree["f:status"].(map[string]any)
		for _, p := range path {
			if !ok {
				break
			}
			node, ok = node[p].(map[string]any)
		}
		if ok {
			out[mf.Manager] = true
		}
	}
	return out
}

func sortedKeys(m map[string]bool) string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return fmt.Sprint(ks)
}
