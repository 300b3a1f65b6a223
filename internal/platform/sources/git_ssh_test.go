package sources_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/sources"
	"sensorium.dev/workbench/internal/test/sourcetest"
)

// sshPrereqs skips when the ssh client git runs is not installed (the server's
// git-upload-pack is checked by sourcetest.ServeSSH).
func sshPrereqs(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/ssh"); err != nil {
		t.Skipf("no ssh client at /usr/bin/ssh (git's ssh transport runs it): %v", err)
	}
}

// sshSecretForms are the forms a leaked private key could take in a file: the PEM as
// given, its base64 body (one line of it is enough to recognize), and the raw key blob.
func sshSecretForms(t *testing.T, key sourcetest.SSHKey) [][]byte {
	t.Helper()
	forms := [][]byte{key.PEM}
	for _, line := range strings.Split(string(key.PEM), "\n") {
		if len(line) >= 32 && !strings.HasPrefix(line, "-----") {
			forms = append(forms, []byte(line))
		}
	}
	body := strings.Join(strings.Split(strings.TrimSpace(string(key.PEM)), "\n")[1:], "")
	body = strings.TrimSuffix(body, "-----END OPENSSH PRIVATE KEY-----")
	raw, err := base64.StdEncoding.DecodeString(body)
	if err != nil || len(raw) < 64 {
		t.Fatalf("decode the key's PEM body: %v", err)
	}
	return append(forms, raw)
}

// assertNoSecret walks dir (everything in it, .git included) for any of the forms.
func assertNoSecret(t *testing.T, dir string, forms [][]byte) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if os.IsNotExist(err) && p == dir {
				return filepath.SkipAll
			}
			return err
		}
		if !d.Type().IsRegular() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		for _, f := range forms {
			if bytes.Contains(b, f) {
				t.Errorf("%s holds the ssh private key (%d bytes of it)", p, len(f))
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// assertNothingCheckedOut: dst holds at most the .git of git init, no file of the repository.
func assertNothingCheckedOut(t *testing.T, dst string) {
	t.Helper()
	entries, err := os.ReadDir(dst)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != ".git" {
			t.Errorf("%s checked out after a refused fetch", e.Name())
		}
	}
}

// TestGitSSH fetches over ssh:// from an in-process SSH server (golang.org/x/crypto/ssh)
// that runs git-upload-pack for one accepted client key, on loopback.
func TestGitSSH(t *testing.T) {
	sshPrereqs(t)
	parent := t.TempDir()
	_, ids := sourcetest.Repo(t, parent, "private", gitFiles(), map[string]string{"README.md": "second\n"})
	client := sourcetest.NewSSHKey(t)
	srv := sourcetest.ServeSSH(t, parent, client.Public)
	url := srv.URL("private")
	pol := sources.Policy{AllowedHosts: []string{"127.0.0.1"}}
	forms := sshSecretForms(t, client)
	ctx := context.Background()

	t.Run("pinned host key and accepted key", func(t *testing.T) {
		g, dst := newGit(t), newDst(t)
		res, err := g.MaterializeGit(ctx, sources.GitSource{URL: url, Commit: ids[0], Credentials: sources.GitCredentials{SSHPrivateKey: client.PEM, KnownHosts: srv.KnownHosts()}}, pol, dst, sources.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if res.Resolved != ids[0] {
			t.Fatalf("resolved %s, want %s", res.Resolved, ids[0])
		}
		if head := sourcetest.Git(t, dst, "rev-parse", "HEAD"); head != ids[0] {
			t.Fatalf("HEAD %s, want %s", head, ids[0])
		}
		if b, _ := os.ReadFile(filepath.Join(dst, "README.md")); string(b) != "hello\n" {
			t.Fatalf("README.md = %q: not the first commit", b)
		}
		if srv.Execs.Load() == 0 {
			t.Fatal("the server ran no upload-pack: the fetch did not go over ssh")
		}
		if cfg, _ := os.ReadFile(filepath.Join(dst, ".git/config")); bytes.Contains(cfg, []byte("ssh")) || bytes.Contains(cfg, []byte(srv.Addr)) {
			t.Fatalf(".git/config names the remote: %q", cfg)
		}
		assertNoSecret(t, dst, forms)
		assertNoSecret(t, g.Scratch, forms)
		if entries, _ := os.ReadDir(g.Scratch); len(entries) != 0 {
			t.Fatalf("scratch left after the fetch: %v", entries)
		}
	})

	t.Run("known_hosts pins another host key", func(t *testing.T) {
		g, dst := newGit(t), newDst(t)
		pinned := srv.KnownHostsFor(sourcetest.NewSSHKey(t).Public)
		before := srv.AuthAttempts.Load()
		_, err := g.MaterializeGit(ctx, sources.GitSource{URL: url, Commit: ids[0], Credentials: sources.GitCredentials{SSHPrivateKey: client.PEM, KnownHosts: pinned}}, pol, dst, sources.Limits{})
		if got := actuation.CodeOf(err); got != actuation.CodeSourceHostKeyUnknown {
			t.Fatalf("got %v (%s), want %s", err, got, actuation.CodeSourceHostKeyUnknown)
		}
		if n := srv.AuthAttempts.Load() - before; n != 0 {
			t.Fatalf("the client offered %d keys to a server whose host key it does not know", n)
		}
		assertNothingCheckedOut(t, dst)
		assertNoSecret(t, dst, forms)
		assertNoSecret(t, g.Scratch, forms)
		if strings.Contains(err.Error(), string(client.PEM)) {
			t.Fatal("the refusal message holds the key")
		}
	})

	t.Run("client key not accepted", func(t *testing.T) {
		g, dst := newGit(t), newDst(t)
		wrong := sourcetest.NewSSHKey(t)
		before := srv.Execs.Load()
		_, err := g.MaterializeGit(ctx, sources.GitSource{URL: url, Commit: ids[0], Credentials: sources.GitCredentials{SSHPrivateKey: wrong.PEM, KnownHosts: srv.KnownHosts()}}, pol, dst, sources.Limits{})
		if got := actuation.CodeOf(err); got != actuation.CodeSourceCredentialsRejected {
			t.Fatalf("got %v (%s), want %s", err, got, actuation.CodeSourceCredentialsRejected)
		}
		if srv.Execs.Load() != before {
			t.Fatal("the server ran upload-pack for a key it does not accept")
		}
		assertNothingCheckedOut(t, dst)
		assertNoSecret(t, g.Scratch, sshSecretForms(t, wrong))
	})

	t.Run("key without known_hosts", func(t *testing.T) {
		g, dst := newGit(t), newDst(t)
		before := srv.AuthAttempts.Load()
		_, err := g.MaterializeGit(ctx, sources.GitSource{URL: url, Commit: ids[0], Credentials: sources.GitCredentials{SSHPrivateKey: client.PEM}}, pol, dst, sources.Limits{})
		if got := actuation.CodeOf(err); got != actuation.CodeSourceCredentialsInvalid {
			t.Fatalf("got %v (%s), want %s", err, got, actuation.CodeSourceCredentialsInvalid)
		}
		if srv.AuthAttempts.Load() != before {
			t.Fatal("the key was offered without a pinned host key")
		}
		assertNothingCheckedOut(t, dst)
		assertNoSecret(t, g.Scratch, forms)
	})

	t.Run("no credentials: no host is trusted", func(t *testing.T) {
		g, dst := newGit(t), newDst(t)
		_, err := g.MaterializeGit(ctx, sources.GitSource{URL: url, Commit: ids[0]}, pol, dst, sources.Limits{})
		if got := actuation.CodeOf(err); got != actuation.CodeSourceHostKeyUnknown {
			t.Fatalf("got %v (%s), want %s", err, got, actuation.CodeSourceHostKeyUnknown)
		}
		assertNothingCheckedOut(t, dst)
	})
}
