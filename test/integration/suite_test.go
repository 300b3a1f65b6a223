// Package integration exercises the webhooks and controllers through a real kube-apiserver
// with the real CRDs, webhook configurations and RBAC roles.
package integration

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/controllers"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/testkit"
)

var env *envtest.Env

// Short timings so lifecycle tests finish quickly; the production defaults are minutes.
const (
	testConsentTimeout = 10
	testRecheck        = 2 * time.Second
)

func TestMain(m *testing.M) {
	envtest.Main(m, "integration", envtest.Options{Setup: nodeagenttest.ManagerSetupWith(controllers.Config{ConsentTimeoutSeconds: testConsentTimeout, BindingRecheck: testRecheck, Clock: clock.Now})}, &env)
}

func namespace(t testing.TB) string { return env.Namespace(t, "wb-") }

var eventually = testkit.Eventually

var mustRefuse = testkit.MustRefuse

var must = testkit.Must

func ptr[T any](v T) *T { return &v }

// fixtures

func profile(ns, name string, mut ...func(*wbv1.CommandProfileSpec)) *wbv1.CommandProfile {
	p := &wbv1.CommandProfile{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: wbv1.CommandProfileSpec{
			Executable: "/usr/bin/git", FixedArgs: []string{"--no-pager"}, AllowedArgPrefixes: []string{"status", "--short"},
			AllowedRoots: []string{"repo"}, MaxTimeoutSeconds: 120, MaxOutputBytes: 1 << 20,
		},
	}
	for _, m := range mut {
		m(&p.Spec)
	}
	return p
}

func environment(ns, name string) *wbv1.Environment {
	return &wbv1.Environment{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: wbv1.EnvironmentSpec{
			Backend: wbv1.BackendHostLocal,
			Roots:   []wbv1.EnvironmentRoot{{Name: "repo", HostPath: ptr("/srv/work/" + ns + "/" + name)}},
		},
	}
}

func session(ns, name, envName string) *wbv1.TerminalSession {
	return &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: wbv1.ObjectName(envName)}}
}

func command(ns, name string, argv ...string) *wbv1.TerminalCommand {
	return &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "git", Argv: argv, Cwd: wbv1.CwdAddress{Root: "repo"}}}
}

// hostLocalCapability is what a node agent attests for host-local on node.
var hostLocalCapability = envtest.HostLocalCapability

// placedSetup creates a capability for node, a profile, an environment and a session, and
// waits until the environment is placed.
func placedSetup(t *testing.T, ns, node string, prof ...func(*wbv1.CommandProfileSpec)) {
	t.Helper()
	ctx := context.Background()
	capObj := hostLocalCapability(node)
	if err := env.Client.Create(ctx, capObj); err != nil && !strings.Contains(err.Error(), "already exists") {
		t.Fatalf("creating capability: %v", err)
	}
	must(t, env.Client.Create(ctx, profile(ns, "git", prof...)))
	must(t, env.Client.Create(ctx, environment(ns, "e")))
	must(t, env.Client.Create(ctx, session(ns, "s", "e")))
	eventually(t, 20*time.Second, "environment e placed", func() (bool, string) {
		var e wbv1.Environment
		if err := env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "e"}, &e); err != nil {
			return false, err.Error()
		}
		return e.Status.NodeName != "", fmt.Sprintf("%+v", e.Status)
	})
}

func getCommand(t *testing.T, ns, name string) *wbv1.TerminalCommand {
	t.Helper()
	var c wbv1.TerminalCommand
	must(t, env.Client.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, &c))
	return &c
}

func waitCommandPhase(t *testing.T, ns, name string, phase wbv1.CommandPhase) *wbv1.TerminalCommand {
	t.Helper()
	var c *wbv1.TerminalCommand
	eventually(t, 30*time.Second, fmt.Sprintf("command %s phase %s", name, phase), func() (bool, string) {
		c = getCommand(t, ns, name)
		return c.Status.Phase == phase, fmt.Sprintf("phase=%s refusal=%+v conditions=%+v", c.Status.Phase, c.Status.Refusal, c.Status.Conditions)
	})
	return c
}
