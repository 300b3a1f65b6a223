package aggregated

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/remotecommand"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/dataplane"
)

// TestAttachRevoked: an operator's attach with stdin is authorized once, when it opens
// (keystrokes are not authorized one by one), and re-checked while it stays open: when the
// operator's RoleBinding is deleted, the stream ends with a Failure status saying the
// authorization was revoked, within the re-check interval plus the node's decision cache.
func TestAttachRevoked(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := namespace(t)
	setupSessions(t, ns)
	done, out := openEchoingAttach(ctx, t, ns, "before-revocation")
	must(t, env.Client.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: ns}}))
	expectStreamEnd(t, done, out, "revoked", 40*time.Second, "the authorization was revoked")
}

// TestAttachEndsWhenRawInputTurnedOff: turning a session's spec.rawInput off ends an open
// attach with stdin at that event — the node re-checks the session when it reconciles the
// change, not on the periodic RBAC re-check, which this test moves out of reach (1 h).
func TestAttachEndsWhenRawInputTurnedOff(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ns := namespace(t)
	setupSessions(t, ns)
	prev := dataplane.AttachAuthorizationRecheck
	dataplane.AttachAuthorizationRecheck = time.Hour // read when the stream opens
	t.Cleanup(func() { dataplane.AttachAuthorizationRecheck = prev })
	done, out := openEchoingAttach(ctx, t, ns, "raw-input-on")
	var ts wbv1.TerminalSession
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "pty"}, &ts))
	patch := client.MergeFrom(ts.DeepCopy())
	ts.Spec.RawInput = wbv1.RawInputDisabled
	must(t, env.Client.Patch(ctx, &ts, patch))
	expectStreamEnd(t, done, out, "raw-input-disabled", 30*time.Second,
		"raw input was turned off (the RBAC re-check is 1 h away)")
}

// openEchoingAttach opens an attach with stdin to session "pty" of ns as operator "op" (a
// service account bound to workbench-operator) and types marker until the terminal echoes
// it. The stream's end arrives on done.
func openEchoingAttach(ctx context.Context, t *testing.T, ns, marker string) (<-chan error, *syncBuffer) {
	t.Helper()
	opCfg, _ := saUser(t, ns, "op", "workbench-operator")
	inR, inW := io.Pipe()
	t.Cleanup(func() { _ = inW.Close() })
	out := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- stream(ctx, opCfg, subPath(ns, "terminalsessions", "pty", "attach")+"?stdin=true&stdout=true&tty=true",
			remotecommand.StreamOptions{Stdin: inR, Stdout: out, Tty: true})
	}()
	echoed := false
	for i := 0; i < 100 && !echoed; i++ {
		_, err := io.WriteString(inW, marker+"\n")
		must(t, err)
		echoed = waitFor(out, marker, 200*time.Millisecond)
	}
	if !echoed {
		t.Fatalf("no echo on the operator's attach: %q", out.String())
	}
	return done, out
}

// expectStreamEnd fails unless the stream ends, within the bound, with an error carrying want.
func expectStreamEnd(t *testing.T, done <-chan error, out *syncBuffer, want string, within time.Duration, what string) {
	t.Helper()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Fatalf("the stream ended without saying %s: %v", what, err)
		}
		t.Logf("stream ended: %v", err)
	case <-time.After(within):
		t.Fatalf("the attach stream outlived the change by %s, want it ended because %s: %q", within, what, out.String())
	}
}
