package nodeagent

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// get reads object ns/name (ns "" for a cluster-scoped one) into obj through the suite's
// client, failing the test on any error.
func get(t testing.TB, ns, name string, obj client.Object) {
	t.Helper()
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj))
}

// refresh reads obj again, by its own namespace and name, failing the test on any error.
func refresh(t testing.TB, obj client.Object) {
	t.Helper()
	must(t, env.Client.Get(context.Background(), client.ObjectKeyFromObject(obj), obj))
}

// hostEnvironment is host-local environment ns/name with root "repo" at dir, placed on
// node through a node selector (none when node is ""); mut adjusts the rest of the spec.
func hostEnvironment(ns, name, dir, node string, mut ...func(*wbv1.EnvironmentSpec)) *wbv1.Environment {
	e := &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr(dir)}},
	}}
	if node != "" {
		e.Spec.NodeSelector = map[string]string{wbv1.NodeLabel: node}
	}
	for _, m := range mut {
		m(&e.Spec)
	}
	return e
}

// session is terminal session ns/name in environment envRef; mut adjusts the rest of the
// spec.
func session(ns, name string, envRef wbv1.ObjectName, mut ...func(*wbv1.TerminalSessionSpec)) *wbv1.TerminalSession {
	s := &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.TerminalSessionSpec{EnvironmentRef: envRef}}
	for _, m := range mut {
		m(&s.Spec)
	}
	return s
}

// commandInFreshEnvironment makes a fresh namespace with an environment over a fresh work
// directory (readyEnvironment), creates profile "p" for exe (variable atoms under
// prefixes) and command "c" running exe with args, and returns the namespace.
func commandInFreshEnvironment(t *testing.T, exe string, prefixes []string, args ...string) string {
	t.Helper()
	ctx := context.Background()
	ns := namespace(t)
	readyEnvironment(t, ns, workDir(t))
	must(t, env.Client.Create(ctx, profile(ns, "p", exe, nil, prefixes)))
	must(t, env.Client.Create(ctx, command(ns, "c", append([]string{exe}, args...)...)))
	return ns
}

// catPTYSession creates profile "cat" (the cat binary at catPath, PTY allowed) and session
// "pty" in environment envRef running it on a PTY, raw input for operators only, and waits
// within for the session to run.
func catPTYSession(t *testing.T, ns string, envRef wbv1.ObjectName, catPath string, within time.Duration) {
	t.Helper()
	ctx := context.Background()
	must(t, env.Client.Create(ctx, profile(ns, "cat", catPath, nil, nil, func(s *wbv1.CommandProfileSpec) { s.PTY = "Allowed" })))
	must(t, env.Client.Create(ctx, session(ns, "pty", envRef, func(s *wbv1.TerminalSessionSpec) {
		s.ShellProfileRef, s.RawInput = ptr(wbv1.ObjectName("cat")), wbv1.RawInputOperatorOnly
	})))
	eventually(t, within, "PTY session pty running", func() (bool, string) {
		var s wbv1.TerminalSession
		get(t, ns, "pty", &s)
		return s.Status.Phase == wbv1.SessionRunning, fmt.Sprintf("%+v", s.Status)
	})
}

// runProfiled creates profile name for exe (the atoms args allowed as prefixes) and command
// name running exe with args through it on session sess, with timeoutSeconds (0: the
// command builder's default), and returns the command once final (waitFinal).
func runProfiled(t *testing.T, ns string, sess wbv1.ObjectName, name string, timeoutSeconds int64, exe string, args ...string) *wbv1.TerminalCommand {
	t.Helper()
	ctx := context.Background()
	must(t, env.Client.Create(ctx, profile(ns, name, exe, nil, args)))
	c := command(ns, name, append([]string{exe}, args...)...)
	c.Spec.ProfileRef, c.Spec.SessionRef = wbv1.ObjectName(name), sess
	if timeoutSeconds > 0 {
		c.Spec.TimeoutSeconds = timeoutSeconds
	}
	must(t, env.Client.Create(ctx, c))
	return waitFinal(t, ns, name)
}

// update reads object ns/name afresh through c, applies change and writes it back
// (Update), retrying on a conflict with the agent's or the manager's own writes; any other
// error fails the test.
func update[T any, PT interface {
	*T
	client.Object
}](t testing.TB, c client.Client, ns, name string, change func(PT)) {
	t.Helper()
	must(t, retry.RetryOnConflict(retry.DefaultRetry, func() error {
		obj := PT(new(T))
		if err := c.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, obj); err != nil {
			return err
		}
		change(obj)
		return c.Update(context.Background(), obj)
	}))
}
