package cli

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

var update = flag.Bool("update", false, "rewrite the golden files under testdata/")

// TestRunGitStatus: the agent runs `git status` with argv[0] as a base name; the CLI
// resolves the profile, creates a session, streams the output and exits 0; in a directory
// that is not a repository git exits 128 and so does the CLI.
func TestRunGitStatus(t *testing.T) {
	ns := namespace(t)
	gitProfile(t, ns)
	environment(t, ns, "e", gitRepo(t))

	r := kw(t, ns, agentUser, "run", "-e", "e", "--", "git", "status")
	if r.code != 0 {
		t.Fatalf("run git status: %s", r)
	}
	if !strings.Contains(r.stderr, "terminalcommand/run-git-") {
		t.Fatalf("run did not name its command: %s", r)
	}
	if subresourcesServed(t) {
		if !strings.Contains(r.stdout, "On branch main") || !strings.Contains(r.stdout, "nothing to commit") {
			t.Fatalf("output of git status not streamed: %s", r)
		}
	} else if !strings.Contains(r.stderr, "output of this command cannot be read") {
		t.Fatalf("without the aggregated API, run must say the output cannot be read: %s", r)
	}
	var cmds wbv1.TerminalCommandList
	must(t, st.Env.Client.List(context.Background(), &cmds, ctrlclient.InNamespace(ns)))
	// The outcome is the conditions' (status.phase mirrors them a moment later).
	if len(cmds.Items) != 1 || wbv1.CommandPhaseFor(cmds.Items[0].Status.Conditions) != wbv1.CommandSucceeded || cmds.Items[0].Spec.Argv[1] != "--no-pager" ||
		cmds.Items[0].Spec.ProfileRef != "git-readonly" || cmds.Items[0].Status.OutputDigest == "" {
		t.Fatalf("commands = %+v", cmds.Items)
	}

	// Exit code passthrough: a directory that is not a repository.
	plain, err := os.MkdirTemp(st.Workspace, "plain-")
	must(t, err)
	environment(t, ns, "plain", plain)
	r = kw(t, ns, agentUser, "run", "-e", "plain", "--", "git", "status")
	if r.code != 128 {
		t.Fatalf("git status outside a repository must exit 128: %s", r)
	}
}

// TestConsentFlow: the agent's run waits for consent and says who may approve; an
// operator approves from another process; the agent's run finishes with the command's
// output and exit code. A denied request ends the agent's run with the consent exit code.
func TestConsentFlow(t *testing.T) {
	ns := namespace(t)
	gitProfile(t, ns)
	dir := gitRepo(t)
	must(t, os.WriteFile(filepath.Join(dir, "README"), []byte("hello\nchanged\n"), 0o644))
	environment(t, ns, "e", dir)

	agentRun := startKW(t, ns, agentUser, "run", "-e", "e", "--", "git", "diff", "--stat")
	req := agentRun.waitConsent(t)
	// The agent may not list RBAC bindings, so it is told the role rather than its members.
	for _, want := range []string{"/usr/bin/git --no-pager diff --stat", "may approve", "workbench-operator", "consent approve " + req} {
		if !strings.Contains(agentRun.stderrText(), want) {
			t.Fatalf("the waiting run must show %q:\n%s", want, agentRun.stderrText())
		}
	}
	// The agent cannot approve its own request.
	if r := kw(t, ns, agentUser, "consent", "approve", req); r.code != 77 {
		t.Fatalf("an agent approving must exit 77 (forbidden): %s", r)
	}
	r := kw(t, ns, operatorUser, "consent", "ls")
	if r.code != 0 || !strings.Contains(r.stdout, req) {
		t.Fatalf("consent ls: %s", r)
	}
	if r := kw(t, ns, operatorUser, "consent", "approve", req); r.code != 0 {
		t.Fatalf("consent approve: %s", r)
	}
	res := agentRun.wait(t)
	if res.code != 0 {
		t.Fatalf("the agent's run after approval: %s", res)
	}
	if subresourcesServed(t) && !strings.Contains(res.stdout, "README | 1 +") {
		t.Fatalf("the agent's run must print the diff stat: %s", res)
	}

	// Deny: the run ends with exit 67 and the code consent-denied.
	agentRun = startKW(t, ns, agentUser, "run", "-e", "e", "--", "git", "log", "-p")
	req = agentRun.waitConsent(t)
	if r := kw(t, ns, operatorUser, "consent", "deny", req); r.code != 0 {
		t.Fatalf("consent deny: %s", r)
	}
	res = agentRun.wait(t)
	if res.code != 67 || !strings.Contains(res.stderr, "consent-denied") {
		t.Fatalf("a denied run must exit 67 with consent-denied: %s", res)
	}
}

// TestExitCodes: each refusal class exits with its documented code (docs/cli.md).
func TestExitCodes(t *testing.T) {
	ns := namespace(t)
	gitProfile(t, ns)
	environment(t, ns, "e", gitRepo(t))
	for _, tc := range []struct {
		name string
		user string
		args []string
		code int
		text string
	}{
		{"usage", agentUser, []string{"run"}, 64, "requires at least 1 arg"},
		{"bad flag", agentUser, []string{"env", "ls", "--nope"}, 64, "unknown flag"},
		{"refused by admission", agentUser, []string{"run", "-e", "e", "--timeout", "999", "--", "git", "status"}, 65, "timeout-above-max"},
		{"not found", agentUser, []string{"run", "-e", "e", "-p", "nope", "--", "git", "status"}, 66, "not found"},
		{"forbidden", agentUser, []string{"env", "create", "x", "--root", "repo=" + st.Workspace}, 77, "forbidden"},
		{"patch approve forbidden", agentUser, []string{"patch", "approve", "nope"}, 77, ""},
		{"unknown environment", agentUser, []string{"run", "-e", "missing", "--", "git", "status"}, 66, "not found"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := kw(t, ns, tc.user, tc.args...)
			if r.code != tc.code || !strings.Contains(r.stderr, tc.text) {
				t.Fatalf("want exit %d with %q: %s", tc.code, tc.text, r)
			}
		})
	}
}

// TestGoldenJSON compares -o json output with testdata/*.json after normalizing volatile
// fields (names' generated suffixes, times, UIDs, resource versions, temp paths).
func TestGoldenJSON(t *testing.T) {
	ns := namespace(t)
	gitProfile(t, ns)
	forbidden := &wbv1.CommandProfile{}
	must(t, st.Env.Client.Get(context.Background(), ctrlclient.ObjectKey{Namespace: ns, Name: "git-readonly"}, forbidden))
	strict := forbidden.DeepCopy()
	strict.ObjectMeta = metav1.ObjectMeta{Name: "git-strict", Namespace: ns}
	strict.Spec.ConsentPrompting = wbv1.ConsentPromptingForbidden
	must(t, st.Env.Client.Create(context.Background(), strict))
	dir := gitRepo(t)
	environment(t, ns, "e", dir)

	golden(t, "env-ls", ns, dir, kw(t, ns, agentUser, "env", "ls", "-o", "json"), 0)
	golden(t, "run-refused", ns, dir, kw(t, ns, agentUser, "run", "-o", "json", "-e", "e", "-p", "git-strict", "--", "git", "push"), 66)
	agentRun := startKW(t, ns, agentUser, "run", "-e", "e", "--", "git", "blame", "README")
	agentRun.waitConsent(t)
	golden(t, "consent-ls", ns, dir, kw(t, ns, operatorUser, "consent", "ls", "-o", "json"), 0)
	agentRun.cancel()
}

var (
	generated = regexp.MustCompile(`-[bcdfghjklmnpqrstvwxz2456789]{5}\b`)
	uuid      = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)
	volatile  = map[string]bool{"creationTimestamp": true, "resourceVersion": true, "uid": true, "lastTransitionTime": true,
		"startTime": true, "completionTime": true, "expiresAt": true, "decidedAt": true, "observedAt": true, "time": true,
		"commandID": true, "lastHeartbeatTime": true, "retainedUntil": true, "planDigest": true}
)

// normalize blanks volatile fields. Conditions become sorted "Type=Status" strings: their
// reasons and messages belong to the controllers (whose own tests pin them), not to the
// CLI's output format.
func normalize(v any) any {
	switch x := v.(type) {
	case map[string]any:
		delete(x, "managedFields")
		for k, val := range x {
			if conds, ok := val.([]any); ok && k == "conditions" {
				var out []string
				for _, c := range conds {
					if m, ok := c.(map[string]any); ok {
						out = append(out, fmt.Sprintf("%v=%v", m["type"], m["status"]))
					}
				}
				sort.Strings(out)
				x[k] = out
				continue
			}
			if volatile[k] {
				x[k] = "<volatile>"
				continue
			}
			x[k] = normalize(val)
		}
	case []any:
		for i := range x {
			x[i] = normalize(x[i])
		}
	}
	return v
}

func golden(t *testing.T, name, ns, dir string, r result, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("%s: want exit %d: %s", name, code, r)
	}
	var v any
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		t.Fatalf("%s: -o json is not JSON: %v\n%s", name, err, r)
	}
	b, err := json.MarshalIndent(normalize(v), "", "  ")
	must(t, err)
	s := strings.ReplaceAll(string(b), dir, "<repo>")
	s = strings.ReplaceAll(s, ns, "<namespace>")
	s = uuid.ReplaceAllString(s, "<uid>")
	s = generated.ReplaceAllString(s, "-xxxxx") + "\n"
	path := filepath.Join("testdata", name+".json")
	if *update {
		must(t, os.WriteFile(path, []byte(s), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	must(t, err)
	if s != string(want) {
		t.Fatalf("%s differs from %s (rerun with -update after checking):\n%s", name, path, s)
	}
}

// TestCpExport: cp ENV:ROOT/PATH exports a subtree as an Artifact (the node captures it
// with a digest) and downloads it, checking the bytes against that digest.
func TestCpExport(t *testing.T) {
	ns := namespace(t)
	dir := gitRepo(t)
	environment(t, ns, "e", dir)
	out := filepath.Join(t.TempDir(), "export.tar")
	r := kw(t, ns, operatorUser, "cp", "-o", "json", "e:repo/README", out)
	var arts wbv1.ArtifactList
	must(t, st.Env.Client.List(context.Background(), &arts, ctrlclient.InNamespace(ns)))
	if len(arts.Items) != 1 || arts.Items[0].Status.Digest == "" || arts.Items[0].Spec.Source != "export" {
		t.Fatalf("export artifact = %+v\n%s", arts.Items, r)
	}
	if !subresourcesServed(t) {
		if r.code != 69 || !strings.Contains(r.stderr, "is not served") {
			t.Fatalf("without the aggregated API, cp must exit 69 (unavailable): %s", r)
		}
		t.Skip("the export was captured (digest " + string(arts.Items[0].Status.Digest) + "); downloading it needs the aggregated API (subresources.workbench.sensorium.dev), which this control plane does not serve yet")
	}
	if r.code != 0 {
		t.Fatalf("cp: %s", r)
	}
	var res struct{ Digest string }
	must(t, json.Unmarshal([]byte(r.stdout), &res))
	b, err := os.ReadFile(out)
	must(t, err)
	if res.Digest != string(arts.Items[0].Status.Digest) || len(b) == 0 || !bytes.Contains(b, []byte("hello")) {
		t.Fatalf("downloaded %d bytes, digest %s; artifact %s", len(b), res.Digest, arts.Items[0].Status.Digest)
	}
}

// running is a kubectl-workbench process running in the background.
type running struct {
	cmd    *exec.Cmd
	cancel context.CancelFunc
	out    bytes.Buffer
	mu     sync.Mutex
	errb   bytes.Buffer
	lines  chan string
	done   chan struct{}
}

func startKW(t *testing.T, ns, user string, args ...string) *running {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	r := &running{cancel: cancel, lines: make(chan string, 256), done: make(chan struct{})}
	r.cmd = kwCommand(ctx, ns, user, args...)
	r.cmd.Stdout = &r.out
	pipe, err := r.cmd.StderrPipe()
	must(t, err)
	must(t, r.cmd.Start())
	go func() {
		defer close(r.done)
		sc := bufio.NewScanner(pipe)
		for sc.Scan() {
			r.mu.Lock()
			r.errb.WriteString(sc.Text() + "\n")
			r.mu.Unlock()
			select {
			case r.lines <- sc.Text():
			default:
			}
		}
	}()
	t.Cleanup(func() { cancel(); _ = r.cmd.Wait() })
	return r
}

func (r *running) stderrText() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.errb.String()
}

// waitConsent waits (at most a minute) until the run says it waits for consent and
// returns the consent request it named.
func (r *running) waitConsent(t *testing.T) string {
	t.Helper()
	deadline := time.After(time.Minute)
	re := regexp.MustCompile(`consentrequest/(\S+)`)
	for {
		select {
		case l := <-r.lines:
			if strings.HasPrefix(l, "waiting") {
				m := re.FindStringSubmatch(r.stderrText())
				if m == nil {
					t.Fatalf("the run waits without naming a consent request:\n%s", r.stderrText())
				}
				return m[1]
			}
		case <-r.done:
			t.Fatalf("process ended before waiting for consent:\n%s", r.stderrText())
		case <-deadline:
			t.Fatalf("not waiting for consent within a minute:\n%s", r.stderrText())
		}
	}
}

func (r *running) wait(t *testing.T) result {
	t.Helper()
	<-r.done
	err := r.cmd.Wait()
	res := result{stdout: r.out.String(), stderr: r.stderrText()}
	if ee, ok := err.(*exec.ExitError); ok {
		res.code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("waiting for kubectl-workbench: %v", err)
	}
	return res
}
