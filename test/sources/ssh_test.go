package sources

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/test/sourcetest"
)

// TestGitSourceSSHKeyNeverLeaks: a repository served over ssh:// by an in-process SSH
// server (golang.org/x/crypto/ssh running git-upload-pack for one client key) on loopback,
// the key and the pinned known_hosts in an opted-in Secret (ssh-privatekey, known_hosts).
// The Environment is Ready at the commit, recorded in status.roots, and the private key is
// in no file under the agent's state directory (the workspace, its .git, the store), no
// event, no status and no agent log. A key the server does not accept fails the
// Environment with source-credentials-rejected in the Ready condition and status.roots.
func TestGitSourceSSHKeyNeverLeaks(t *testing.T) {
	if _, err := os.Stat("/usr/bin/ssh"); err != nil {
		t.Skipf("no ssh client at /usr/bin/ssh (git's ssh transport runs it): %v", err)
	}
	ctx := context.Background()
	served := t.TempDir()
	_, ids := sourcetest.Repo(t, served, "private", map[string]string{"README.md": "over ssh\n"})
	client := sourcetest.NewSSHKey(t)
	srv := sourcetest.ServeSSH(t, served, client.Public)

	secret := func(ns string, key []byte) {
		must(t, env.Client.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "ssh-creds", Namespace: ns,
			Labels: map[string]string{wbv1.SourceCredentialsLabel: "true"}},
			Data: map[string][]byte{"ssh-privatekey": key, "known_hosts": srv.KnownHosts()}}))
	}
	root := wbv1.EnvironmentRoot{Git: &wbv1.GitRootSource{URL: srv.URL("private"), Commit: ptr(ids[0]),
		CredentialsSecretRef: &wbv1.SecretKeyReference{Name: "ssh-creds"}}}
	// What a leaked key looks like: any full line of its PEM body.
	var needles []string
	for _, line := range strings.Split(string(client.PEM), "\n") {
		if len(line) >= 32 && !strings.HasPrefix(line, "-----") {
			needles = append(needles, line)
		}
	}
	if len(needles) == 0 {
		t.Fatalf("no key lines in %d bytes of PEM", len(client.PEM))
	}

	t.Run("accepted key", func(t *testing.T) {
		ns := namespace(t)
		secret(ns, client.PEM)
		sourcedEnvironment(t, ns, root)
		e := waitEnvironment(t, ns)
		if e.Status.Phase != wbv1.EnvironmentReady {
			t.Fatalf("environment not Ready: %+v", e.Status)
		}
		if len(e.Status.Roots) != 1 || e.Status.Roots[0].Resolved != ids[0] || e.Status.Roots[0].Kind != "git" || e.Status.Roots[0].Entries == 0 || e.Status.Roots[0].Reason != "" {
			t.Fatalf("status.roots = %+v", e.Status.Roots)
		}
		if srv.Execs.Load() == 0 {
			t.Fatal("the SSH server ran no upload-pack: the checkout did not come over ssh")
		}
		copies, _ := filepath.Glob(filepath.Join(stateDir, "fixtures", string(e.UID), "repo", "fx-*"))
		if len(copies) != 1 {
			t.Fatalf("managed copies: %v", copies)
		}
		if b, err := os.ReadFile(filepath.Join(copies[0], "README.md")); err != nil || string(b) != "over ssh\n" {
			t.Fatalf("README.md: %q %v", b, err)
		}
		noLeak(t, "the key", e, ns, logs.String(), stateDir, needles...)
		if logs.String() == "" {
			t.Fatal("no agent log was captured: the log check above proves nothing")
		}
	})

	t.Run("key not accepted", func(t *testing.T) {
		ns := namespace(t)
		secret(ns, sourcetest.NewSSHKey(t).PEM)
		sourcedEnvironment(t, ns, root)
		wantFailedWith(t, waitEnvironment(t, ns), actuation.CodeSourceCredentialsRejected)
	})
}
