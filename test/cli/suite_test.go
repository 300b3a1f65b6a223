// Package cli tests kubectl-workbench and workbench-mcp as BUILT binaries against a real API
// server, the manager's controllers and webhooks, and a real node agent running sandboxed
// processes (internal/test/stack). Identities: wb-agent (workbench-agent) and wb-operator
// (workbench-operator), reached with --as from an admin kubeconfig, and a ServiceAccount
// token for the HTTP MCP server.
package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/discovery"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends/guestenv"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/test/stack"
	"sensorium.dev/workbench/internal/test/testkit"
)

const (
	agentUser    = "wb-agent"
	operatorUser = "wb-operator"
)

var st *stack.Stack

func TestMain(m *testing.M) {
	procexec.MaybeRunHelper()
	guestenv.MaybeRunRelay() // and as the guest PTY relay of a VM session
	st = stack.StartForMain("cli suite", "./cmd/kubectl-workbench", "./cmd/workbench-mcp")
	ctx := context.Background()
	for user, role := range map[string]string{agentUser: "workbench-agent", operatorUser: "workbench-operator"} {
		if err := st.Env.Bind(ctx, role, user, ""); err != nil {
			fmt.Fprintln(os.Stderr, "binding", user, err)
			st.Stop()
			os.Exit(1)
		}
	}
	code := m.Run()
	st.Stop()
	os.Exit(code)
}

// result is one finished invocation of a binary.
type result struct {
	stdout, stderr string
	code           int
}

func (r result) String() string {
	return fmt.Sprintf("exit %d\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
}

// kw runs kubectl-workbench with the test kubeconfig in ns as user ("" = admin).
func kw(t *testing.T, ns, user string, args ...string) result {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := kwCommand(ctx, ns, user, args...)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	r := result{stdout: out.String(), stderr: errb.String()}
	var ee *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &ee):
		r.code = ee.ExitCode()
	default:
		t.Fatalf("running kubectl-workbench %v: %v", args, err)
	}
	return r
}

func kwCommand(ctx context.Context, ns, user string, args ...string) *exec.Cmd {
	full := []string{"--kubeconfig", st.Kubeconfig, "-n", ns}
	if user != "" {
		full = append(full, "--as", user)
	}
	return exec.CommandContext(ctx, st.Bin("kubectl-workbench"), append(full, args...)...)
}

var must = testkit.Must

func namespace(t testing.TB) string { return st.Env.Namespace(t, "cli-") }

// gitRepo makes a git repository with one commit inside the admitted root.
func gitRepo(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp(st.Workspace, "repo-")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(dir, "README"), []byte("hello\n"), 0o644))
	for _, args := range [][]string{{"init", "-q", "-b", "main"}, {"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@localhost", "commit", "-qm", "one"}} {
		cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
	}
	return dir
}

// gitProfile is a git profile like config/samples/01_commandprofile.yaml.
func gitProfile(t *testing.T, ns string) {
	t.Helper()
	p := &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "git-readonly", Namespace: ns}, Spec: wbv1.CommandProfileSpec{
		Executable: "/usr/bin/git", FixedArgs: []string{"--no-pager"}, AllowedArgPrefixes: []string{"status", "log", "--oneline", "--short"},
		AllowedRoots: []string{"repo"},
		Env: wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "LANG", Value: "C.UTF-8"}, {Name: "PATH", Value: "/usr/bin:/bin"},
			{Name: "GIT_CONFIG_NOSYSTEM", Value: "1"}, {Name: "HOME", Value: "/nonexistent"}}},
		MaxTimeoutSeconds: 120, MaxOutputBytes: 1 << 20,
	}}
	must(t, st.Env.Client.Create(context.Background(), p))
}

// environment creates Environment name over dir through the CLI, as the operator.
func environment(t *testing.T, ns, name, dir string) {
	t.Helper()
	r := kw(t, ns, operatorUser, "env", "create", name, "--root", "repo="+dir)
	if r.code != 0 || !strings.Contains(r.stdout, "environment/"+name+" Ready") {
		t.Fatalf("env create: %s", r)
	}
}

// subresourcesServed says whether the aggregated API is registered in this control plane.
func subresourcesServed(t *testing.T) bool {
	t.Helper()
	dc, err := discovery.NewDiscoveryClientForConfig(st.Env.Config)
	must(t, err)
	groups, err := dc.ServerGroups()
	must(t, err)
	for _, g := range groups.Groups {
		if g.Name == "subresources.workbench.sensorium.dev" {
			return true
		}
	}
	return false
}
