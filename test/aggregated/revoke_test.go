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
	opCfg, _ := saUser(t, ns, "op", "workbench-operator")
	inR, inW := io.Pipe()
	defer func() { _ = inW.Close() }()
	var out syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- stream(ctx, opCfg, subPath(ns, "terminalsessions", "pty", "attach")+"?stdin=true&stdout=true&tty=true",
			remotecommand.StreamOptions{Stdin: inR, Stdout: &out, Tty: true})
	}()
	echoed := false
	for i := 0; i < 100 && !echoed; i++ {
		_, err := io.WriteString(inW, "before-revocation\n")
		must(t, err)
		echoed = waitFor(&out, "before-revocation", 200*time.Millisecond)
	}
	if !echoed {
		t.Fatalf("no echo on the operator's attach: %q", out.String())
	}
	must(t, env.Client.Delete(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "op", Namespace: ns}}))
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "revoked") {
			t.Fatalf("the stream ended without saying the authorization was revoked: %v", err)
		}
		t.Logf("stream ended: %v", err)
	case <-time.After(40 * time.Second):
		t.Fatalf("the attach stream outlived the revocation by 40s: %q", out.String())
	}
}
