package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// TestShareView: the operator shares a session with `kubectl workbench view create` and
// `view grant`; an agent without the grant verb cannot grant; the participant follows the
// screen with `view watch -o json` until `view revoke` ends it with view-grant-revoked.
func TestShareView(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	dir, err := os.MkdirTemp(st.Workspace, "view-")
	must(t, err)
	c := st.Env.Client
	must(t, c.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: &dir}},
		OperationalContext: &wbv1.OperationalContext{Class: "test"}}}))
	must(t, c.Create(ctx, &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "cat", Namespace: ns}, Spec: wbv1.CommandProfileSpec{
		Executable: "/bin/cat", AllowedRoots: []string{"repo"}, PTY: "Allowed", MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 20,
		Env: wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}}}}}))
	cat := wbv1.ObjectName("cat")
	must(t, c.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e", ShellProfileRef: &cat}}))
	deadline := time.Now().Add(time.Minute)
	for {
		var s wbv1.TerminalSession
		must(t, c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, &s))
		if s.Status.Phase == wbv1.SessionRunning && s.Labels[wbv1.NodeLabel] != "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("session not Running: %+v", s.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}

	if r := kw(t, ns, operatorUser, "view", "create", "v", "--session", "s", "--ceiling", "test"); r.code != 0 || !strings.Contains(r.stdout, "terminalview/v created") || !strings.Contains(r.stdout, "context test") {
		t.Fatalf("view create: %s", r)
	}
	const viewer = "wb-viewer"
	// Membership: workbench-view-observer in the namespace (st.Env.Bind waits for a right
	// this role does not carry, so bind and wait here).
	must(t, c.Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "viewer", Namespace: ns},
		Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: viewer}},
		RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "workbench-view-observer"}}))
	for deadline := time.Now().Add(10 * time.Second); ; {
		sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{User: viewer,
			ResourceAttributes: &authorizationv1.ResourceAttributes{Namespace: ns, Verb: "get", Group: "subresources.workbench.sensorium.dev",
				Resource: "terminalviews", Subresource: "stream"}}}
		must(t, c.Create(ctx, sar))
		if sar.Status.Allowed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the viewer's membership is not in effect after 10s")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// An agent holds no grant right (RBAC refuses viewgrants; the webhook would refuse
	// view-grant-not-authorized without the verb grant): exit 77, forbidden.
	if r := kw(t, ns, agentUser, "view", "grant", "v", "--user", viewer); r.code != 77 {
		t.Fatalf("an agent granting a view: %s", r)
	}
	if r := kw(t, ns, operatorUser, "view", "grant", "v", "--user", viewer, "--name", "g", "--ttl", "48h"); r.code == 0 || !strings.Contains(r.stderr, "view-grant-lifetime-invalid") {
		t.Fatalf("a 48h grant: %s", r)
	}
	if r := kw(t, ns, operatorUser, "view", "grant", "v", "--user", viewer, "--name", "g", "--ttl", "1h"); r.code != 0 || !strings.Contains(r.stdout, "viewgrant/g created") {
		t.Fatalf("view grant: %s", r)
	}
	if !subresourcesServed(t) {
		t.Log("the aggregated API is not served by this stack: view watch is exercised in test/aggregated")
		return
	}
	// --frames 1: the current screen once, then exit 0 (the README's First run uses it).
	if r := kw(t, ns, viewer, "view", "watch", "v", "--frames", "1", "-o", "json"); r.code != 0 || strings.Count(r.stdout, `"type":"frame"`) != 1 {
		t.Fatalf("view watch --frames 1: %s", r)
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	cmd := kwCommand(wctx, ns, viewer, "view", "watch", "v", "-o", "json")
	out, err := cmd.StdoutPipe()
	must(t, err)
	var errb strings.Builder
	cmd.Stderr = &errb
	must(t, cmd.Start())
	frames := make(chan string, 64)
	go func() {
		defer close(frames)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			frames <- sc.Text()
		}
	}()
	select {
	case l, ok := <-frames:
		if !ok || !strings.Contains(l, `"type":"frame"`) || !strings.Contains(l, `"operationalContext":"test"`) {
			t.Fatalf("first line of view watch: %q (stderr %s)", l, errb.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("no frame from view watch; stderr %s", errb.String())
	}
	if r := kw(t, ns, operatorUser, "view", "revoke", "g"); r.code != 0 || !strings.Contains(r.stdout, "viewgrant/g revoked") {
		t.Fatalf("view revoke: %s", r)
	}
	for range frames {
	}
	err = cmd.Wait()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() == 0 || !strings.Contains(errb.String(), "view-grant-revoked") {
		t.Fatalf("view watch after revoke: %v, stderr %s", err, errb.String())
	}
	fmt.Fprintf(os.Stderr, "view watch ended with exit %d: %s", ee.ExitCode(), errb.String())
}
