package nodeagent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/proctest"
	"sensorium.dev/workbench/internal/test/sourcetest"
)

// processesIn lists the processes whose working directory lies under dir.
func processesIn(dir string) []string {
	pids, _ := proctest.Pids()
	var out []string
	for _, pid := range pids {
		cwd, err := os.Readlink(proctest.Path(pid, "cwd"))
		if err == nil && strings.HasPrefix(cwd, dir+"/") {
			comm, _ := os.ReadFile(proctest.Path(pid, "comm"))
			out = append(out, strconv.Itoa(pid)+":"+strings.TrimSpace(string(comm))+"@"+cwd)
		}
	}
	return out
}

// TestSourceMaterializationInterruptedByCrash (issue 28, re-materialize after an agent
// restart): the node agent is killed (SIGKILL) while it fetches a git source over HTTP (the
// server holds the pack request). The Environment is not Ready while the copy is
// incomplete; no fetch process outlives the agent; the restarted agent removes the
// interrupted staging copy and the scratch it left, materializes the source again and
// reports the commit in status.roots — the half-written copy is never used.
func TestSourceMaterializationInterruptedByCrash(t *testing.T) {
	ctx := context.Background()
	bin := buildAgent(t)
	const node = "node-srccrash"
	kubeconfig := boundNodeKubeconfig(t, node)
	state := t.TempDir()
	defer func() { must(t, nodeagenttest.Release(agent.Config{NodeName: node, StateDir: state})) }() // the copy's loop disk
	served := t.TempDir()
	_, ids := sourcetest.Repo(t, served, "r", map[string]string{"README.md": "after the crash\n", "src/a.go": "package a\n"})
	backend := sourcetest.ServeGit(t, served, "")
	target, err := url.Parse(backend.URL)
	must(t, err)
	proxy := httputil.NewSingleHostReverseProxy(target)
	// Only the first agent's pack request is held (until release): the restarted agent's
	// fetch goes through, so what the test waits for never depends on catching the moment
	// between the sweep of the dead agent's processes and the new fetch.
	var held atomic.Bool
	entered, release := make(chan struct{}, 1), make(chan struct{})
	var releaseOnce sync.Once
	releaseHeld := func() { releaseOnce.Do(func() { close(release) }) }
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "git-upload-pack") && held.CompareAndSwap(false, true) {
			entered <- struct{}{}
			// A client that dies with its request body unread is not seen by the server
			// (no background read), so the held handler ends on release, which every
			// exit of the test closes before Close waits for the handlers.
			select {
			case <-release:
			case <-r.Context().Done():
			}
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	defer func() { releaseHeld(); front.CloseClientConnections(); front.Close() }()
	host := strings.TrimPrefix(front.URL, "http://")
	config := agentConfig(t, node, state, "repo", t.TempDir(), fmt.Sprintf("sources:\n  allowedHosts: [%q]\n", host))

	first := startAgentProcess(t, bin, kubeconfig, config)
	ns := namespace(t)
	must(t, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendFixtureCopy, Roots: []wbv1.EnvironmentRoot{{Name: "repo", Git: &wbv1.GitRootSource{URL: front.URL + "/r", Commit: ptr(ids[0])}}},
		NodeSelector: map[string]string{wbv1.NodeLabel: node},
	}}))
	select {
	case <-entered:
	case <-time.After(90 * time.Second):
		first.Stop()
		t.Fatalf("the agent never fetched the pack; agent log:\n%s", first.LogTail())
	}
	var e wbv1.Environment
	get(t, ns, "e", &e)
	copies := filepath.Join(state, "fixtures", string(e.UID), "repo")
	staging, _ := filepath.Glob(filepath.Join(copies, ".staging-*"))
	if len(staging) != 1 {
		t.Fatalf("while the fetch is held: staging copies %v (want the one being filled)", staging)
	}
	must(t, first.Crash()) // SIGKILL mid-materialization
	// git's remote helper (blocked on the held request) outlives the SIGKILL; the restarted
	// agent ends it before its first fetch (sources.SweepScratch).
	dead := processesIn(state)
	t.Logf("processes left in the state directory by the killed agent: %v", dead)

	second := startAgentProcess(t, bin, kubeconfig, config) // the server still holds the old request
	eventually(t, 60*time.Second, "the restarted agent ends the dead agent's fetch processes", func() (bool, string) {
		var alive []string
		for _, p := range dead {
			pid, _, _ := strings.Cut(p, ":")
			if _, err := os.Stat("/proc/" + pid); err == nil {
				alive = append(alive, p)
			}
		}
		return len(alive) == 0, fmt.Sprint(alive)
	})
	releaseHeld()
	defer second.StopLogging(t)
	eventually(t, 120*time.Second, "the restarted agent materializes the source again", func() (bool, string) {
		get(t, ns, "e", &e)
		return e.Status.Phase == wbv1.EnvironmentReady, fmt.Sprintf("%+v", e.Status)
	})
	if len(e.Status.Roots) != 1 || e.Status.Roots[0].Resolved != ids[0] || e.Status.Roots[0].Reason != "" || e.Status.Roots[0].Entries == 0 {
		t.Fatalf("status.roots after the restart: %+v", e.Status.Roots)
	}
	published, _ := filepath.Glob(filepath.Join(copies, "fx-*"))
	if len(published) != 1 {
		t.Fatalf("published copies: %v", published)
	}
	if b, err := os.ReadFile(filepath.Join(published[0], "README.md")); err != nil || string(b) != "after the crash\n" {
		t.Fatalf("README.md in the copy: %q %v", b, err)
	}
	if head := sourcetest.Git(t, published[0], "rev-parse", "HEAD"); head != ids[0] {
		t.Fatalf("the copy's HEAD is %s, want %s", head, ids[0])
	}
	if left, _ := filepath.Glob(filepath.Join(copies, ".staging-*")); len(left) != 0 {
		t.Fatalf("the interrupted staging copy is left: %v", left)
	}
	if left, _ := filepath.Glob(filepath.Join(state, "sources-scratch", "*")); len(left) != 0 {
		t.Fatalf("the interrupted fetch's scratch is left: %v", left)
	}
	eventually(t, 30*time.Second, "no fetch process left", func() (bool, string) {
		procs := processesIn(state)
		return len(procs) == 0, fmt.Sprint(procs)
	})
}
