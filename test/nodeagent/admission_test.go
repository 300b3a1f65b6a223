package nodeagent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// TestNodeRefusesWhatTheGateDidNotAdmit: the manager's gate is bypassed — the manager's own
// identity writes the node label and an Admitted status for a command whose argv the
// profile does not admit (it was held AwaitingConsent). The node agent re-runs admission
// against the effective profile before starting anything and refuses with
// argv-not-admitted; the side-effect file the command would create never exists. A command
// the profile admits, through the same path, does run (the side effect is observable).
func TestNodeRefusesWhatTheGateDidNotAdmit(t *testing.T) {
	ctx := context.Background()
	ns, dir := readyWorkEnvironment(t)
	must(t, env.Client.Create(ctx, profile(ns, "p", "/usr/bin/touch", nil, []string{"allowed-"})))

	// Control: an admitted argv runs and leaves its side effect.
	must(t, env.Client.Create(ctx, command(ns, "ok", "/usr/bin/touch", "allowed-ok")))
	if c := waitFinal(t, ns, "ok"); c.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("control command: %+v", c.Status)
	}
	if _, err := os.Stat(filepath.Join(dir, "allowed-ok")); err != nil {
		t.Fatalf("control command left no side effect: %v", err)
	}

	must(t, env.Client.Create(ctx, command(ns, "evil", "/usr/bin/touch", "pwned")))
	var c wbv1.TerminalCommand
	eventually(t, 30*time.Second, "evil held AwaitingConsent by the gate", func() (bool, string) {
		get(t, ns, "evil", &c)
		return c.Status.Phase == wbv1.CommandAwaitingConsent && c.Status.ArgvDigest != "", fmt.Sprintf("%+v", c.Status)
	})
	// Bypass the gate as the manager identity: bind to the node, mark admitted.
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "evil"}, &c); err != nil {
			return err
		}
		c.Labels = map[string]string{wbv1.NodeLabel: nodeName, wbv1.EnvironmentLabel: "e"}
		return env.Client.Update(ctx, &c)
	}))
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "evil"}, &c); err != nil {
			return err
		}
		meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: wbv1.ConditionAdmitted, Status: metav1.ConditionTrue,
			Reason: wbv1.ReasonAdmittedByProfile, Message: "forged: the gate was bypassed", ObservedGeneration: c.Generation})
		c.Status.AdmittedBy, c.Status.Phase = "profile", wbv1.CommandPending
		return env.Client.Status().Update(ctx, &c)
	}))
	final := waitFinal(t, ns, "evil")
	if final.Status.Refusal == nil || final.Status.Refusal.Code != "argv-not-admitted" || final.Status.StartTime != nil || final.Status.NodeName != nodeName {
		t.Fatalf("the node did not refuse the forged admission: %+v", final.Status)
	}
	if _, err := os.Stat(filepath.Join(dir, "pwned")); !os.IsNotExist(err) {
		t.Fatalf("the refused command ran: stat pwned = %v", err)
	}
}

// TestNodeAdvertisesAdmissionCeilings: the WorkbenchNode the agent writes advertises the
// ceilings its runtimes enforce, and they are the ones admission enforces.
func TestNodeAdvertisesAdmissionCeilings(t *testing.T) {
	var n wbv1.WorkbenchNode
	eventually(t, 30*time.Second, "WorkbenchNode caps", func() (bool, string) {
		if err := env.Client.Get(context.Background(), client.ObjectKey{Name: nodeName}, &n); err != nil {
			return false, err.Error()
		}
		return n.Status.Caps != nil && n.Status.Caps.MaxCommandTimeoutSeconds != 0, fmt.Sprintf("%+v", n.Status.Caps)
	})
	c := n.Status.Caps
	if c.MaxCommandTimeoutSeconds != actuation.MaxCommandTimeoutSeconds || c.MaxCommandOutputBytes != actuation.MaxCommandOutputBytes ||
		c.MaxSessionDurationSeconds != actuation.MaxSessionDurationSeconds {
		t.Fatalf("advertised %+v; admission enforces %d s, %d bytes, %d s", c, actuation.MaxCommandTimeoutSeconds,
			actuation.MaxCommandOutputBytes, actuation.MaxSessionDurationSeconds)
	}
}
