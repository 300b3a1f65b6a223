package nodeagent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// codeShareCapReached is actuation.CodeShareCapReached, spelled out so that the test
// reads as the contract.
const codeShareCapReached = "share-cap-reached"

// TestNodeCapsSharedByIdentity (issue 25 item 7): the node-wide caps on sessions and on
// concurrent commands reserve capacity per identity class. A node agent process runs
// with 4 session slots and 4 concurrent-command slots, 1 of each reserved for operators
// and 2 per other identity. Through the real API server (webhooks stamp spec.createdBy):
//   - agent A fills its share of sessions (2); its third is refused by the node with
//     share-cap-reached naming caps.sessions; agent B takes the last non-reserved slot
//     and its second is refused the same way; the operator's session still opens;
//   - in those sessions A runs 2 `sleep` commands, its third is refused share-cap-reached
//     naming caps.concurrentCommands (exactly one outcome: Refused); B runs one and its
//     second is refused; the operator's `sleep` still runs;
//   - slots come back: once A's session closes and one of A's commands is cancelled, A
//     opens a session and runs a command again.
func TestNodeCapsSharedByIdentity(t *testing.T) {
	const node = "node-share"
	ctx := context.Background()
	na := newAgentNode(t, node, "share", "capacityPublishMillis: 100\n"+
		"caps:\n  sessions: 4\n  sessionsPerEnvironment: 4\n  concurrentCommands: 4\n"+
		"sessionShares:\n  operatorReserve: 1\n  perIdentity: 2\n"+
		"commandShares:\n  operatorReserve: 1\n  perIdentity: 2\n")
	p := na.start(t)
	defer p.StopLogging(t)

	ns := namespace(t)
	const opUser, agentA, agentB = "share-operator", "share-agent-a", "share-agent-b"
	must(t, env.Bind(ctx, "workbench-operator", opUser, ns))
	must(t, env.Bind(ctx, "workbench-agent", agentA, ns))
	must(t, env.Bind(ctx, "workbench-agent", agentB, ns))
	opc, err := env.As(opUser)
	must(t, err)
	ac, err := env.As(agentA)
	must(t, err)
	bc, err := env.As(agentB)
	must(t, err)

	dir := na.dir(t, "e")
	must(t, env.Client.Create(ctx, hostEnvironment(ns, "e", dir, node)))
	must(t, env.Client.Create(ctx, profile(ns, "p", "/bin/sleep", nil, []string{"30"})))
	eventually(t, 30*time.Second, "environment Ready", func() (bool, string) {
		var e wbv1.Environment
		get(t, ns, "e", &e)
		return e.Status.Phase == wbv1.EnvironmentReady, fmt.Sprintf("%+v", e.Status)
	})

	// sessionOutcome creates a session as c and waits until it runs or is refused; a
	// refusal at admission counts as refused (its code from the status cause).
	sessionOutcome := func(c client.Client, name string) (running bool, code, msg string) {
		t.Helper()
		err := c.Create(ctx, session(ns, name, "e"))
		if err != nil {
			return false, admissionCode(err), err.Error()
		}
		var s wbv1.TerminalSession
		eventually(t, 30*time.Second, "session "+name+" Running or refused", func() (bool, string) {
			get(t, ns, name, &s)
			return s.Status.Phase == wbv1.SessionRunning || s.Status.Refusal != nil, fmt.Sprintf("%+v", s.Status)
		})
		if s.Status.Refusal != nil {
			return false, s.Status.Refusal.Code, s.Status.Refusal.Message
		}
		return true, "", ""
	}
	opens := func(c client.Client, name string) {
		t.Helper()
		if ok, code, msg := sessionOutcome(c, name); !ok {
			t.Fatalf("session %s: refused %s (%s), want it Running", name, code, msg)
		}
	}
	refusedShare := func(what, code, msg, capName string) {
		t.Helper()
		if code != codeShareCapReached || !strings.Contains(msg, capName) {
			t.Errorf("%s: refused %q (%s), want %s naming %s", what, code, msg, codeShareCapReached, capName)
			return
		}
		t.Logf("%s refused: %s", what, msg)
	}

	// Sessions.
	opens(ac, "a1")
	opens(ac, "a2")
	if ok, code, msg := sessionOutcome(ac, "a3"); ok {
		t.Errorf("agent A's third session opened: one agent holds more than its share of 2 session slots")
	} else {
		refusedShare("agent A's third session", code, msg, "caps.sessions")
	}
	opens(bc, "b1")
	if ok, code, msg := sessionOutcome(bc, "b2"); ok {
		t.Errorf("agent B's second session opened into the operator reserve")
	} else {
		refusedShare("agent B's second session (the non-reserved slots are taken)", code, msg, "caps.sessions")
	}
	opens(opc, "op1") // the operator's session still opens

	// Concurrent commands.
	commandOutcome := func(c client.Client, name, sess string) (running bool, code, msg string) {
		t.Helper()
		cmd := &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.TerminalCommandSpec{
			SessionRef: wbv1.ObjectName(sess), ProfileRef: "p", Argv: []string{"/bin/sleep", "30"}, Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: 60}}
		if err := c.Create(ctx, cmd); err != nil {
			return false, admissionCode(err), err.Error()
		}
		var got wbv1.TerminalCommand
		eventually(t, 30*time.Second, "command "+name+" Running or refused", func() (bool, string) {
			get(t, ns, name, &got)
			return got.Status.Phase == wbv1.CommandRunning || wbv1.CommandIsFinal(got.Status.Conditions), fmt.Sprintf("%+v", got.Status)
		})
		if got.Status.Phase == wbv1.CommandRunning {
			return true, "", ""
		}
		final := waitFinal(t, ns, name)
		if final.Status.Phase != wbv1.CommandRefused || final.Status.Refusal == nil || final.Status.StartTime != nil {
			t.Errorf("command %s: ended %+v, want Refused with a code and never started", name, final.Status)
			return false, "", ""
		}
		return false, final.Status.Refusal.Code, final.Status.Refusal.Message
	}
	runs := func(c client.Client, name, sess string) {
		t.Helper()
		if ok, code, msg := commandOutcome(c, name, sess); !ok {
			t.Fatalf("command %s: refused %s (%s), want it Running", name, code, msg)
		}
	}
	runs(ac, "ca1", "a1")
	runs(ac, "ca2", "a1")
	if ok, code, msg := commandOutcome(ac, "ca3", "a1"); ok {
		t.Errorf("agent A's third sleep runs: one agent holds more than its share of 2 concurrent-command slots")
	} else {
		refusedShare("agent A's third command", code, msg, "caps.concurrentCommands")
	}
	runs(bc, "cb1", "b1")
	if ok, code, msg := commandOutcome(bc, "cb2", "b1"); ok {
		t.Errorf("agent B's second sleep runs in the operator reserve")
	} else {
		refusedShare("agent B's second command (the non-reserved slots are taken)", code, msg, "caps.concurrentCommands")
	}
	runs(opc, "cop", "op1") // the operator's command still starts
	if t.Failed() {
		return
	}

	// Slots come back: A closes a session and cancels a command, then gets both again.
	must(t, env.Client.Patch(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "a2", Namespace: ns}},
		client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"desiredState":"Closed"}}`))))
	must(t, env.Client.Patch(ctx, &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: "ca1", Namespace: ns}},
		client.RawPatch("application/merge-patch+json", []byte(`{"spec":{"desiredState":"Cancelled"}}`))))
	waitFinal(t, ns, "ca1")
	eventually(t, 30*time.Second, "session a2 closed", func() (bool, string) {
		var s wbv1.TerminalSession
		get(t, ns, "a2", &s)
		return s.Status.Phase == wbv1.SessionClosed, fmt.Sprintf("%+v", s.Status)
	})
	opens(ac, "a4")
	runs(ac, "ca4", "a1")
}

// admissionCode is the refusal code of an admission error (its first status cause).
func admissionCode(err error) string {
	var se *apierrors.StatusError
	if errors.As(err, &se) && se.ErrStatus.Details != nil && len(se.ErrStatus.Details.Causes) > 0 {
		return string(se.ErrStatus.Details.Causes[0].Type)
	}
	return "admission: " + err.Error()
}
