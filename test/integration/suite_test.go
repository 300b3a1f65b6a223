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
	"sensorium.dev/workbench/internal/test/kstate"
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
	waitPlaced(t, ns, "e")
}

// waitPlaced waits until environment ns/name is placed on a node and returns it.
func waitPlaced(t *testing.T, ns, name string) *wbv1.Environment {
	t.Helper()
	return kstate.Until(t, env.Client, 20*time.Second, "environment "+name+" placed", ns, name, &wbv1.Environment{},
		func(e *wbv1.Environment) bool { return e.Status.NodeName != "" })
}

func getCommand(t *testing.T, ns, name string) *wbv1.TerminalCommand {
	t.Helper()
	return kstate.Get(t, env.Client, ns, name, &wbv1.TerminalCommand{})
}

// waitCommand waits until ok holds on command ns/name and returns it as last read.
func waitCommand(t *testing.T, ns, name, what string, ok func(*wbv1.TerminalCommand) bool) *wbv1.TerminalCommand {
	t.Helper()
	return kstate.Until(t, env.Client, 30*time.Second, what, ns, name, &wbv1.TerminalCommand{}, ok)
}

func waitCommandPhase(t *testing.T, ns, name string, phase wbv1.CommandPhase) *wbv1.TerminalCommand {
	t.Helper()
	return waitCommand(t, ns, name, fmt.Sprintf("command %s phase %s", name, phase),
		func(c *wbv1.TerminalCommand) bool { return c.Status.Phase == phase })
}

// askConsent creates command ns/name with argv as c (an identity the command is created
// by) and waits until it is held AwaitingConsent; it returns the command.
func askConsent(t *testing.T, c client.Client, ns, name string, argv ...string) *wbv1.TerminalCommand {
	t.Helper()
	must(t, c.Create(context.Background(), command(ns, name, argv...)))
	return waitCommandPhase(t, ns, name, wbv1.CommandAwaitingConsent)
}

// waitAdmittedBy waits until command ns/name is admitted by by (a grant's name, or
// "profile") and returns it.
func waitAdmittedBy(t *testing.T, ns, name, by string) *wbv1.TerminalCommand {
	t.Helper()
	return waitCommand(t, ns, name, name+" admitted by "+by, func(c *wbv1.TerminalCommand) bool { return c.Status.AdmittedBy == by })
}

// waitGrant waits until ok holds on ConsentGrant ns/name and returns it.
func waitGrant(t *testing.T, ns, name, what string, ok func(*wbv1.ConsentGrant) bool) *wbv1.ConsentGrant {
	t.Helper()
	return kstate.Until(t, env.Client, 30*time.Second, what, ns, name, &wbv1.ConsentGrant{}, ok)
}

// waitProfile waits until ok holds on the effective profile ns/git and returns it.
func waitProfile(t *testing.T, ns, what string, ok func(*wbv1.CommandProfile) bool) *wbv1.CommandProfile {
	t.Helper()
	return kstate.Until(t, env.Client, 30*time.Second, what, ns, "git", &wbv1.CommandProfile{}, ok)
}

func getProfile(t *testing.T, ns string) *wbv1.CommandProfile {
	t.Helper()
	return kstate.Get(t, env.Client, ns, "git", &wbv1.CommandProfile{})
}

func getGrant(t *testing.T, ns, name string) *wbv1.ConsentGrant {
	t.Helper()
	return kstate.Get(t, env.Client, ns, name, &wbv1.ConsentGrant{})
}

// waitCommandGone waits until command ns/name is deleted.
func waitCommandGone(t *testing.T, ns, name string) {
	t.Helper()
	kstate.Gone(t, env.Client, 20*time.Second, ns, name, &wbv1.TerminalCommand{})
}
