package security

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/test/kstate"
)

// codeSessionNotOwned is actuation.CodeSessionNotOwned, spelled out so that this file also
// builds (and fails) against a tree without the rule.
const codeSessionNotOwned = "session-not-owned"

// TestAgentCommandIntoOperatorSessionRefused (issue 25 item 6): an agent identity's
// command cannot write into a session that is an operator's terminal — a PTY program with
// raw input, or a structured session the operator publishes as a TerminalView — neither
// when the session exists at admission (the webhook refuses) nor when it appears after
// the command was admitted (the node refuses before starting anything). A creator the
// client writes into the object is overwritten with the requester. The agent's commands
// into its own session, and the operator's into its own published session, still run.
func TestAgentCommandIntoOperatorSessionRefused(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	const opUser, agentUser = "sec-operator", "sec-agent"
	opc := env.BoundAs(t, "workbench-operator", opUser, ns)
	agc := env.BoundAs(t, "workbench-agent", agentUser, ns)

	dir, err := os.MkdirTemp(workspace, "term-")
	must(t, err)
	must(t, os.Chmod(dir, 0o755))
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr(dir)}},
		NodeSelector:       map[string]string{wbv1.NodeLabel: nodeName},
		OperationalContext: &wbv1.OperationalContext{Class: "test"},
	}}))
	defaults := wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "LANG", Value: "C.UTF-8"}, {Name: "PATH", Value: "/usr/bin:/bin"}}}
	must(t, env.Client.Create(ctx, &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns}, Spec: wbv1.CommandProfileSpec{
		Executable: "/bin/echo", AllowedArgPrefixes: []string{"written-by-"}, AllowedRoots: []string{"repo"}, Env: defaults,
		MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 20}}))
	must(t, env.Client.Create(ctx, &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "cat", Namespace: ns}, Spec: wbv1.CommandProfileSpec{
		Executable: "/bin/cat", AllowedRoots: []string{"repo"}, Env: defaults, PTY: "Allowed",
		MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 20}}))

	session := func(c client.Client, name string, pty bool) {
		t.Helper()
		s := &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e"}}
		if pty {
			s.Spec.ShellProfileRef, s.Spec.RawInput = ptr(wbv1.ObjectName("cat")), wbv1.RawInputOperatorOnly
		}
		must(t, c.Create(ctx, s))
	}
	session(opc, "op-pty", true)     // the operator's interactive terminal
	session(opc, "op-shared", false) // the operator's structured session, published below
	session(agc, "agent-own", false) // the agent's own session
	// A creator a client writes is not believed: the agent claims the operator's name.
	forged := &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "forged", Namespace: ns},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e", CreatedBy: opUser}}
	must(t, agc.Create(ctx, forged))
	if forged.Spec.CreatedBy != agentUser {
		t.Fatalf("a session's createdBy is the requester: got %q, want %q", forged.Spec.CreatedBy, agentUser)
	}
	running := func(names ...string) {
		t.Helper()
		eventually(t, 60*time.Second, fmt.Sprintf("environment Ready and sessions %v Running", names), func() (bool, string) {
			return kstate.ReadyAndAllRunning(t, env.Client, ns, "e", names...)
		})
	}
	running("op-pty", "op-shared", "agent-own")
	must(t, opc.Create(ctx, &wbv1.TerminalView{ObjectMeta: metav1.ObjectMeta{Name: "v", Namespace: ns},
		Spec: wbv1.TerminalViewSpec{SessionRef: "op-shared", ClassificationCeiling: "test"}}))

	command := func(c client.Client, name, sess, createdBy string) (*wbv1.TerminalCommand, error) {
		cmd := &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.TerminalCommandSpec{
			SessionRef: wbv1.ObjectName(sess), ProfileRef: "echo", Argv: []string{"/bin/echo", "written-by-" + name},
			Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: 30, OutputBytes: 1 << 16, CreatedBy: createdBy}}
		return cmd, c.Create(ctx, cmd)
	}
	outcome := func(name string) *wbv1.TerminalCommand {
		t.Helper()
		var c wbv1.TerminalCommand
		eventually(t, 90*time.Second, "command "+name+" outcome", func() (bool, string) {
			must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &c))
			return wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions), fmt.Sprintf("%+v", c.Status)
		})
		return &c
	}

	// At admission: into the operator's PTY session, into its published session, and with
	// the operator's name forged as the command's creator.
	for _, c := range []struct{ name, session, createdBy string }{
		{"into-pty", "op-pty", ""},
		{"into-view", "op-shared", ""},
		{"forged-creator", "op-pty", opUser},
	} {
		_, err := command(agc, c.name, c.session, c.createdBy)
		if err == nil || !strings.Contains(err.Error(), codeSessionNotOwned) {
			t.Errorf("the agent's command %s into the operator's session %s: %v, want %s", c.name, c.session, err, codeSessionNotOwned)
		}
	}

	// At the node: the command is admitted before its session exists (the webhook cannot
	// know), then the operator creates that session as its PTY terminal.
	if _, err := command(agc, "early", "late", ""); err != nil {
		t.Fatalf("a command naming a session that does not exist yet is admitted (the node decides): %v", err)
	}
	session(opc, "late", true)
	if c := outcome("early"); c.Status.Refusal == nil || c.Status.Refusal.Code != codeSessionNotOwned || c.Status.StartTime != nil {
		t.Errorf("the node must refuse the agent's command into the operator's late session with %s and start nothing: %+v", codeSessionNotOwned, c.Status)
	}

	// What stays allowed: the agent's command into its own session; the operator's into its
	// own published session.
	for _, c := range []struct {
		cl            client.Client
		name, session string
	}{{agc, "agent-in-own", "agent-own"}, {opc, "op-in-shared", "op-shared"}} {
		cmd, err := command(c.cl, c.name, c.session, "")
		if err != nil {
			t.Fatalf("%s into %s: %v", c.name, c.session, err)
		}
		if got := outcome(c.name); got.Status.Phase != wbv1.CommandSucceeded {
			t.Errorf("%s into its creator's own session %s: %+v", c.name, c.session, got.Status)
		}
		var stored wbv1.TerminalCommand
		must(t, env.Client.Get(ctx, client.ObjectKeyFromObject(cmd), &stored))
		if want := map[string]string{"agent-in-own": agentUser, "op-in-shared": opUser}[c.name]; stored.Spec.CreatedBy != want {
			t.Errorf("%s: createdBy %q, want the requester %q", c.name, stored.Spec.CreatedBy, want)
		}
	}
}
