package sources_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/sources"
	"sensorium.dev/workbench/internal/test/sourcetest"
)

// TestGitFetchByteCap: a repository whose pack is above the node's fetch cap is refused
// with source-fetch-too-large before anything is checked out; the same fetch under a cap
// above it succeeds (the cap, not the repository, refused).
func TestGitFetchByteCap(t *testing.T) {
	parent := t.TempDir()
	blob := make([]byte, 3<<20) // incompressible: the pack is about as large
	if _, err := rand.Read(blob); err != nil {
		t.Fatal(err)
	}
	dir, ids := sourcetest.Repo(t, parent, "big", map[string]string{"blob.bin": string(blob), "README": "hi\n"})
	pol := sources.Policy{AllowedFileDirs: []string{parent}}
	src := sources.GitSource{URL: "file://" + dir, Commit: ids[0]}

	dst := newDst(t)
	_, err := newGit(t).MaterializeGit(context.Background(), src, pol, dst, sources.Limits{MaxFetchBytes: 1 << 20})
	if actuation.CodeOf(err) != actuation.CodeSourceFetchTooLarge {
		t.Fatalf("fetch above the cap: got %v, want %s", err, actuation.CodeSourceFetchTooLarge)
	}
	if _, err := os.Stat(filepath.Join(dst, "README")); err == nil {
		t.Fatal("the tree was checked out although the fetch was refused")
	}

	dst = newDst(t)
	if _, err := newGit(t).MaterializeGit(context.Background(), src, pol, dst, sources.Limits{MaxFetchBytes: 16 << 20}); err != nil {
		t.Fatalf("the same fetch under a 16 MiB cap: %v", err)
	}
}

// TestGitFetchTimeKillsHelpers: a server that never answers is cut at the fetch's time
// bound; git's whole process group dies, so the remote helper's connection closes (not
// only the git process the agent started).
func TestGitFetchTimeKillsHelpers(t *testing.T) {
	closed := make(chan struct{}, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-r.Context().Done() // stall until the client goes away
		select {
		case closed <- struct{}{}:
		default:
		}
	}))
	defer func() { srv.CloseClientConnections(); srv.Close() }()
	g := newGit(t)
	g.Timeout = 2 * time.Second
	_, err := g.MaterializeGit(context.Background(), sources.GitSource{URL: srv.URL + "/repo.git", Commit: "0123456789abcdef0123456789abcdef01234567"},
		sources.Policy{AllowedHosts: []string{srv.Listener.Addr().String()}}, newDst(t), sources.Limits{})
	if actuation.CodeOf(err) != actuation.CodeSourceFetchFailed {
		t.Fatalf("stalled fetch: got %v, want %s", err, actuation.CodeSourceFetchFailed)
	}
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("the stalled request's connection is still open 30 s after the fetch returned: a git helper outlived the fetch")
	}
}
