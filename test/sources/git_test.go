package sources

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/sourcetest"
)

// fileContains reports the regular files under dir that hold needle.
// noLeak fails (naming what the secrets are) when any secret appears in e's status, an
// event of ns, the agent's log or a file under its state directory.
func noLeak(t *testing.T, what string, e *wbv1.Environment, ns, log, stateDir string, secrets ...string) {
	t.Helper()
	for _, sec := range secrets {
		if strings.Contains(statusJSON(e), sec) {
			t.Errorf("the status holds %s", what)
		}
		if strings.Contains(eventsText(t, ns), sec) {
			t.Errorf("an event holds %s", what)
		}
		if strings.Contains(log, sec) {
			t.Errorf("the agent's log holds %s", what)
		}
	}
	if hits := filesContaining(t, stateDir, secrets...); len(hits) > 0 {
		t.Errorf("files under the agent's state directory hold %s: %v", what, hits)
	}
}

func filesContaining(t *testing.T, dir string, needles ...string) []string {
	t.Helper()
	var hits []string
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return nil
		}
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				hits = append(hits, p)
			}
		}
		return nil
	})
	return hits
}

// TestGitSourcePrivateTokenNeverLeaks: a private repository served over smart HTTP on
// loopback, its token in an opted-in Secret; the Environment is Ready only once the commit
// is checked out, status.roots records the commit, and the token (nor its Basic encoding)
// is in no file under the agent's state directory (the workspace, its .git, the store), in
// the environment a command prints inside the sandbox (cat /proc/self/environ), in an event, in the agent's logs or in
// the status.
func TestGitSourcePrivateTokenNeverLeaks(t *testing.T) {
	ctx := context.Background()
	ns := namespace(t)
	served := t.TempDir()
	_, ids := sourcetest.Repo(t, served, "private", map[string]string{"README.md": "private\n", "src/main.go": "package main\n"})
	const token = "ghp-h3-token-7c1e9d-must-not-leak"
	srv := sourcetest.ServeGit(t, served, token)
	must(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "git-creds", Namespace: ns,
		Labels: map[string]string{wbv1.SourceCredentialsLabel: "true"}}, StringData: map[string]string{"token": token}}))
	sourcedEnvironment(t, ns, wbv1.EnvironmentRoot{Git: &wbv1.GitRootSource{URL: srv.URL + "/private", Commit: ptr(ids[0]),
		CredentialsSecretRef: &wbv1.SecretKeyReference{Name: "git-creds"}}})
	e := waitEnvironment(t, ns)
	if e.Status.Phase != wbv1.EnvironmentReady {
		t.Fatalf("environment not Ready: %+v", e.Status)
	}
	if len(e.Status.Roots) != 1 || e.Status.Roots[0].Resolved != ids[0] || e.Status.Roots[0].Kind != "git" || e.Status.Roots[0].Bytes == 0 ||
		e.Status.Roots[0].Entries == 0 || e.Status.Roots[0].Reason != "" {
		t.Fatalf("status.roots = %+v", e.Status.Roots)
	}
	if srv.Requests.Load() == 0 || srv.Requests.Load() == srv.Unauthorized.Load() {
		t.Fatalf("the server saw %d requests, %d unauthorized", srv.Requests.Load(), srv.Unauthorized.Load())
	}

	// A command in the environment: its whole environment, and the checkout.
	must(t, env.Client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: ns}, Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e"}}))
	must(t, env.Client.Create(ctx, &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns}, Spec: wbv1.CommandProfileSpec{
		Executable: "/bin/cat", AllowedArgPrefixes: []string{"/proc/self/environ"}, AllowedRoots: []string{"repo"}, MaxTimeoutSeconds: 30, MaxOutputBytes: 1 << 20,
		Env: wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}}}}}))
	must(t, env.Client.Create(ctx, &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: "env", Namespace: ns},
		Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "p", Argv: []string{"/bin/cat", "/proc/self/environ"}, Cwd: wbv1.CwdAddress{Root: "repo"}, TimeoutSeconds: 20}}))
	var c wbv1.TerminalCommand
	eventually(t, 60*time.Second, "command env finished", func() (bool, string) {
		must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "env"}, &c))
		return wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions), string(c.Status.Phase)
	})
	if c.Status.Phase != wbv1.CommandSucceeded {
		t.Fatalf("env: %+v", c.Status)
	}
	var s wbv1.TerminalSession
	must(t, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: "s"}, &s))
	out, _, err := ag.Output(string(s.UID), uint64(c.Status.SeqFrom), uint64(c.Status.SeqTo))
	must(t, err)
	if !strings.Contains(string(out), "PATH=") {
		t.Fatalf("env printed %q", out)
	}

	secrets := []string{token, sourcetest.BasicToken(token)}
	for _, sec := range secrets {
		if strings.Contains(string(out), sec) {
			t.Errorf("the sandbox's environment holds the credential: %q", out)
		}
	}
	noLeak(t, "the credential", e, ns, logs.String(), stateDir, secrets...)
	// The checkout is there, at the commit, with .git host-owned and minimal.
	copies, _ := filepath.Glob(filepath.Join(stateDir, "fixtures", string(e.UID), "repo", "fx-*"))
	if len(copies) != 1 {
		t.Fatalf("managed copies: %v", copies)
	}
	if b, err := os.ReadFile(filepath.Join(copies[0], "README.md")); err != nil || string(b) != "private\n" {
		t.Fatalf("README.md: %q %v", b, err)
	}
	if cfg, _ := os.ReadFile(filepath.Join(copies[0], ".git", "config")); strings.Contains(string(cfg), "extraheader") || strings.Contains(string(cfg), srv.URL) {
		t.Fatalf(".git/config: %q", cfg)
	}
	if hooks, err := os.ReadDir(filepath.Join(copies[0], ".git", "hooks")); err != nil || len(hooks) != 0 {
		t.Fatalf(".git/hooks: %v %v", hooks, err)
	}
	if logs.String() == "" {
		t.Fatal("no agent log was captured: the log check above proves nothing")
	}
}

// TestGitSourceRefusals: a wrong commit, a host outside the allowlist, a Secret not opted in
// and a sourced root on host-local: each refused with its code, in the Ready condition and
// in status.roots[].reason.
func TestGitSourceRefusals(t *testing.T) {
	ctx := context.Background()
	_, ids := sourcetest.Repo(t, repos, "pub-"+strings.ToLower(t.Name()[len(t.Name())-6:]), map[string]string{"a": "a\n"})
	repo := filepath.Join(repos, "pub-"+strings.ToLower(t.Name()[len(t.Name())-6:]))
	cases := []struct {
		name string
		root wbv1.EnvironmentRoot
		pre  func(ns string)
		code actuation.Code
	}{
		{"wrong commit", wbv1.EnvironmentRoot{Git: &wbv1.GitRootSource{URL: "file://" + repo, Commit: ptr(strings.Repeat("0", 40))}}, nil, actuation.CodeSourceCommitNotFound},
		{"host outside allowlist", wbv1.EnvironmentRoot{Git: &wbv1.GitRootSource{URL: "https://git.invalid/r.git", Commit: ptr(ids[0])}}, nil, actuation.CodeSourceHostNotAllowed},
		{"file dir outside allowlist", wbv1.EnvironmentRoot{Git: &wbv1.GitRootSource{URL: "file:///etc", Commit: ptr(ids[0])}}, nil, actuation.CodeSourceHostNotAllowed},
		{"secret not opted in", wbv1.EnvironmentRoot{Git: &wbv1.GitRootSource{URL: "file://" + repo, Commit: ptr(ids[0]), CredentialsSecretRef: &wbv1.SecretKeyReference{Name: "plain"}}},
			func(ns string) {
				must(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "plain", Namespace: ns}, StringData: map[string]string{"token": "x"}}))
			}, actuation.CodeSourceCredentialsInvalid},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ns := namespace(t)
			if c.pre != nil {
				c.pre(ns)
			}
			sourcedEnvironment(t, ns, c.root)
			wantFailedWith(t, waitEnvironment(t, ns), c.code)
		})
	}
	// The webhook refuses what is malformed before any node sees it.
	ns := namespace(t)
	err := env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "bad", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{{Name: "repo", Git: &wbv1.GitRootSource{URL: "https://user:pw@git.example.org/r.git", Commit: ptr(ids[0])}}}}})
	if err == nil || !strings.Contains(err.Error(), string(actuation.CodeSourceInvalid)) {
		t.Fatalf("credentials in the URL: %v", err)
	}
	err = env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "hl", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", Git: &wbv1.GitRootSource{URL: "file://" + repo, Commit: ptr(ids[0])}}}}})
	if err == nil || !strings.Contains(err.Error(), string(actuation.CodeSourceBackendUnsupported)) {
		t.Fatalf("a sourced root on host-local: %v", err)
	}
}

// TestGitSourceRefResolved: a branch (allowed by this node's policy) resolves to its commit,
// recorded in status.roots[].resolved.
func TestGitSourceRefResolved(t *testing.T) {
	_, ids := sourcetest.Repo(t, repos, "refs", map[string]string{"a": "1\n"}, map[string]string{"a": "2\n"})
	ns := namespace(t)
	sourcedEnvironment(t, ns, wbv1.EnvironmentRoot{Git: &wbv1.GitRootSource{URL: "file://" + filepath.Join(repos, "refs"), Ref: ptr("main")}})
	e := waitEnvironment(t, ns)
	if e.Status.Phase != wbv1.EnvironmentReady || len(e.Status.Roots) != 1 || e.Status.Roots[0].Resolved != ids[1] {
		t.Fatalf("status = %+v", e.Status)
	}
}
