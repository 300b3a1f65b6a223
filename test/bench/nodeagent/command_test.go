// Package nodeagent benchmarks the node agent end to end against a real API server, each
// figure next to a floor measured in the same run.
package nodeagent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/platform/spans"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/samples"
	"sensorium.dev/workbench/internal/test/testkit"
)

const node = "bench-node"

// concurrentCommands is the bench agent's concurrency cap (BenchmarkCommandThroughput puts
// up to this many commands in flight).
const concurrentCommands = 32

// benchSessions is the bench agent's session cap.
const benchSessions = 8

var (
	env      *envtest.Env
	wc       client.WithWatch
	admitted string // the agent's admitted root
)

func TestMain(m *testing.M) {
	nodeagenttest.Main(m, nodeagenttest.Options{Name: "bench", Setup: func(s *nodeagenttest.Suite) error {
		env, admitted = s.Env, s.Workspace
		var err error
		if wc, err = client.NewWithWatch(env.Config, client.Options{Scheme: env.Scheme}); err != nil {
			return err
		}
		// The agent's own small sandbox helper, as deployed next to the agent binary.
		helper := s.Dir + "/workbench-sandbox"
		if err := nodeagenttest.BuildHelper(helper); err != nil {
			return err
		}
		cfg := agent.Config{NodeName: node, StateDir: s.StateDir, AdmittedRoots: map[string]string{"work": admitted},
			Caps: agent.Caps{Sessions: benchSessions, ConcurrentCommands: concurrentCommands, PrestartedSandboxes: prestarted()}}
		cfg.QEMU, qemuSkip = nodeagenttest.QEMU()
		_, err = s.StartAgent(cfg, agent.Options{HelperPath: helper})
		return err
	}})
}

// setup creates a namespace with a profile for /bin/true, an environment and a session on
// the bench node, and waits until the session runs.
func setup(b *testing.B) string {
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "bench-"}}
	must(b, env.Client.Create(ctx, ns))
	work, err := os.MkdirTemp(admitted, "ws-")
	must(b, err)
	must(b, env.Client.Create(ctx, &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "true", Namespace: ns.Name},
		Spec: wbv1.CommandProfileSpec{Executable: "/bin/true", AllowedRoots: []string{"repo"}}}))
	hp := work
	must(b, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: "e", Namespace: ns.Name}, Spec: wbv1.EnvironmentSpec{
		Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: &hp}},
		NodeSelector: map[string]string{wbv1.NodeLabel: node}}}))
	addSession(b, ns.Name, "s")
	return ns.Name
}

// addSession creates a session of environment "e" in ns and waits until it runs.
func addSession(b *testing.B, ns, name string) {
	ctx := context.Background()
	must(b, env.Client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e"}}))
	deadline := time.Now().Add(60 * time.Second)
	for {
		var s wbv1.TerminalSession
		must(b, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s))
		if s.Status.Phase == wbv1.SessionRunning {
			return
		}
		if time.Now().After(deadline) {
			b.Fatalf("session %s not running: %+v", name, s.Status)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// must is the shared testkit.Must.
var must = testkit.Must

// BenchmarkCommandTrue measures TerminalCommand create → Succeeded for /bin/true through the
// API server, the consent gate and the node agent, against the floor of an API create +
// watch round trip (a ConfigMap) plus a bare fork/exec of /bin/true. Run with -benchtime=Nx.
//
// It also reports where the time goes: every component in this process (the manager's
// controllers, the node agent, the sandbox runner, this benchmark's watch) marks the steps
// of each command (internal/platform/spans), and span-<step>-p50-ms is the median time from
// Create to that step.
func BenchmarkCommandTrue(b *testing.B) {
	ctx := context.Background()
	ns := setup(b)
	rec := spans.NewRecorder()
	spans.Install(rec)
	defer spans.Install(nil)
	steps := map[string]samples.Durations{}
	// One sample of each path per iteration, interleaved: the floor (API create+watch round
	// trip, then a bare fork/exec) and the product path see the same machine load.
	var floorAPI, floorExec, floor, full, admitted, started samples.Durations
	// writes counts the versions of each command after its create (every API write of it
	// its watch delivered: status writes, finalizer changes) up to its final phase.
	writes := 0
	for i := 0; i < b.N; i++ {
		// Floor 1: create + watch until the API server reports it.
		w, err := wc.Watch(ctx, &corev1.ConfigMapList{}, client.InNamespace(ns))
		must(b, err)
		t0 := time.Now()
		must(b, env.Client.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "m" + strconv.Itoa(i), Namespace: ns}}))
		for ev := range w.ResultChan() {
			if ev.Type == watch.Added {
				break
			}
		}
		floorAPI = append(floorAPI, time.Since(t0))
		w.Stop()
		// Floor 2: a bare fork/exec.
		t1 := time.Now()
		must(b, exec.Command("/bin/true").Run())
		floorExec = append(floorExec, time.Since(t1))
		floor = append(floor, floorAPI[i]+floorExec[i])
		// Full path.
		w, err = wc.Watch(ctx, &wbv1.TerminalCommandList{}, client.InNamespace(ns))
		must(b, err)
		t2 := time.Now()
		must(b, env.Client.Create(ctx, &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: "c" + strconv.Itoa(i), Namespace: ns},
			Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "true", Argv: []string{"/bin/true"}, Cwd: wbv1.CwdAddress{Root: "repo"}}}))
		key := ns + "/c" + strconv.Itoa(i)
		spans.Mark(key, "create-returned")
		seenAdmitted, seenStarted := false, false
		for ev := range w.ResultChan() {
			c, ok := ev.Object.(*wbv1.TerminalCommand)
			if ok && c.Name == "c"+strconv.Itoa(i) {
				spans.Mark(key, "watch-event-"+string(c.Status.Phase))
				if ev.Type == watch.Modified {
					writes++
				}
			}
			if ok && c.Name == "c"+strconv.Itoa(i) && !seenAdmitted && hasTrue(c, wbv1.ConditionAdmitted) {
				seenAdmitted = true
				admitted = append(admitted, time.Since(t2))
			}
			if ok && c.Name == "c"+strconv.Itoa(i) && !seenStarted && hasTrue(c, wbv1.ConditionStarted) {
				seenStarted = true
				started = append(started, time.Since(t2))
			}
			// Done when the conditions are final and the phase a user reads agrees with them
			// (whoever writes it): that is the end of the product path.
			if ok && c.Name == "c"+strconv.Itoa(i) && wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions) {
				if c.Status.Phase != wbv1.CommandSucceeded {
					b.Fatalf("command %s: %+v", c.Name, c.Status)
				}
				break
			}
		}
		full = append(full, time.Since(t2))
		w.Stop()
		for _, p := range rec.Take(key) {
			steps[p.Step] = append(steps[p.Step], p.At.Sub(t2))
		}
	}
	reportSpans(b, steps)
	b.ReportMetric(float64(writes)/float64(b.N), "writes-after-create/cmd")
	full.Report(b, "cmd")
	admitted.Report(b, "admitted")
	started.Report(b, "started")
	floorAPI.Report(b, "api-roundtrip")
	floorExec.Report(b, "fork-exec")
	floor.Report(b, "floor")
	samples.Ratio(b, "cmd-to-floor", full, floor)
}

// BenchmarkIdleSessionMemory opens 100 idle PTY sessions (/bin/cat) in one session manager
// and reports the agent-side memory per session: Go heap and process RSS deltas.
func BenchmarkIdleSessionMemory(b *testing.B) {
	const sessions = 100
	for i := 0; i < b.N; i++ {
		mgr := session.NewManager(session.Caps{Sessions: sessions, SessionsPerEnvironment: sessions, ReaderTasks: 2 * sessions})
		runtime.GC()
		var before runtime.MemStats
		runtime.ReadMemStats(&before)
		rssBefore := rssBytes()
		var open []*session.Session
		for j := 0; j < sessions; j++ {
			s, err := mgr.Open(context.Background(), session.Spec{ID: fmt.Sprintf("s%d", j), EnvironmentID: "e", Argv: []string{"/bin/cat"},
				Env: []string{"PATH=/usr/bin:/bin"}, Dir: "/", Rows: 24, Cols: 80})
			must(b, err)
			open = append(open, s)
		}
		time.Sleep(500 * time.Millisecond) // let every reader park
		runtime.GC()
		var after runtime.MemStats
		runtime.ReadMemStats(&after)
		rssAfter := rssBytes()
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/sessions/1024, "heap-KiB/session")
		b.ReportMetric(float64(rssAfter-rssBefore)/sessions/1024, "rss-KiB/session")
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		_ = mgr.Shutdown(ctx)
		cancel()
		_ = open
	}
}

func rssBytes() int64 {
	b, err := os.ReadFile("/proc/self/statm")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	pages, _ := strconv.ParseInt(f[1], 10, 64)
	return pages * int64(os.Getpagesize())
}

func hasTrue(c *wbv1.TerminalCommand, t string) bool {
	for _, cd := range c.Status.Conditions {
		if cd.Type == t && cd.Status == metav1.ConditionTrue {
			return true
		}
	}
	return false
}

// reportSpans reports each step's median time from Create as span-<step>-p50-ms (and how
// many of the commands passed through it as span-<step>-n when not all did), and logs the
// steps in order of their medians.
func reportSpans(b *testing.B, steps map[string]samples.Durations) {
	names := make([]string, 0, len(steps))
	for name := range steps {
		names = append(names, name)
	}
	slices.SortFunc(names, func(x, y string) int { return int(steps[x].Quantile(0.5) - steps[y].Quantile(0.5)) })
	var prev time.Duration
	for _, name := range names {
		d := steps[name]
		p50 := d.Quantile(0.5)
		b.ReportMetric(samples.Ms(p50), "span-"+name+"-p50-ms")
		if len(d) != b.N {
			b.ReportMetric(float64(len(d)), "span-"+name+"-n")
		}
		b.Logf("%-40s %8.2f ms from create (+%6.2f), %d/%d commands", name, samples.Ms(p50), samples.Ms(p50-prev), len(d), b.N)
		prev = p50
	}
}

// prestarted is the agent's pre-started sandbox pool for this run: the agent's default
// (agent.DefaultPrestartedSandboxes) unless BENCH_PRESTARTED_SANDBOXES says otherwise, 0
// meaning off (to compare both in one build).
func prestarted() int {
	n, err := strconv.Atoi(os.Getenv("BENCH_PRESTARTED_SANDBOXES"))
	switch {
	case err != nil:
		return 0 // unset: the agent's default
	case n <= 0:
		return -1 // off
	}
	return n
}
