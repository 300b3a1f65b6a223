package nodeagent

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/platform/spans"
)

// throughputN is how many commands (and ConfigMaps, and bare execs) one iteration of
// BenchmarkCommandThroughput puts in flight: BENCH_THROUGHPUT_N, default 24 (at most the
// agent's concurrency cap, so none is refused for the cap).
func throughputN() int {
	if n, err := strconv.Atoi(os.Getenv("BENCH_THROUGHPUT_N")); err == nil && n > 0 {
		return min(n, concurrentCommands)
	}
	return 24
}

// throughputSessions is how many sessions of one environment the N commands are spread over,
// round robin: BENCH_THROUGHPUT_SESSIONS, default 1 (at most the agent's session cap). With
// K > 1 the figure is per node; comparing K=1 with K>1 tells per-session from per-node
// serialization.
func throughputSessions() int {
	if k, err := strconv.Atoi(os.Getenv("BENCH_THROUGHPUT_SESSIONS")); err == nil && k > 0 {
		return min(k, benchSessions)
	}
	return 1
}

// creators is how many goroutines issue the creates of one batch (both the ConfigMaps and
// the commands: the same client concurrency for the floor and the product path).
const creators = 8

// BenchmarkCommandThroughput puts N commands (/bin/true) in flight at once and measures
// the time until every one is seen final on a watch, against two floors measured in the
// same iteration, interleaved: N ConfigMap creates until every one is seen on a watch (what
// the API server and etcd sustain for one object per item), and N bare fork/execs of the
// same argv running concurrently (what the machine sustains for the process itself).
// Reported: commands/s, configmaps/s, execs/s and the ratio of commands/s to the smaller
// floor (the goal: at least 0.5).
//
// A command is done when its conditions are final and the phase a user reads agrees with
// them (wbv1.CommandIsFinal and Status.Phase == wbv1.CommandPhaseFor): the public API, so
// the figure is comparable across changes of who writes the status.
func BenchmarkCommandThroughput(b *testing.B) {
	ctx := context.Background()
	ns := setup(b)
	n := throughputN()
	sessions := throughputSessions()
	for k := 1; k < sessions; k++ {
		addSession(b, ns, "s"+strconv.Itoa(k))
	}
	sessionOf := func(j int) string {
		if k := j % sessions; k > 0 {
			return "s" + strconv.Itoa(k)
		}
		return "s"
	}
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = -1, 0 // no client-side rate limit: the server is what is measured
	cc, err := client.NewWithWatch(cfg, client.Options{Scheme: env.Scheme})
	must(b, err)
	var cmdRate, cmRate, execRate, cmdCPU, cmCPU, busyFrac []float64
	var rec *spans.Recorder
	var peaks []float64
	if os.Getenv("BENCH_THROUGHPUT_SPANS") != "" {
		rec = spans.NewRecorder()
		spans.Install(rec)
		defer spans.Install(nil)
	}
	for i := 0; i < b.N; i++ {
		// Floor 1: N ConfigMaps created, until the watch has shown every one.
		c0 := treeCPU()
		d := inFlight(ctx, b, cc, ns, &corev1.ConfigMapList{}, n, func(j int) client.Object {
			return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("t%d-%d", i, j), Namespace: ns}}
		}, func(watch.Event) bool { return true })
		cmRate = append(cmRate, float64(n)/d.Seconds())
		cmCPU = append(cmCPU, float64((treeCPU()-c0).Milliseconds())/float64(n))
		// Floor 2: N bare fork/execs of the same argv, concurrently.
		t0 := time.Now()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for j := 0; j < n; j++ {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- exec.Command("/bin/true").Run() }()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			must(b, err)
		}
		execRate = append(execRate, float64(n)/time.Since(t0).Seconds())
		// The product path: N commands, until the watch has shown every one's outcome.
		var failed []string
		var mu sync.Mutex
		c0 = treeCPU()
		byName := treeCPUByName()
		busy0, total0 := machineCPU()
		d = inFlight(ctx, b, cc, ns, &wbv1.TerminalCommandList{}, n, func(j int) client.Object {
			return &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("t%d-%d", i, j), Namespace: ns},
				Spec: wbv1.TerminalCommandSpec{SessionRef: wbv1.ObjectName(sessionOf(j)), ProfileRef: "true", Argv: []string{"/bin/true"}, Cwd: wbv1.CwdAddress{Root: "repo"}}}
		}, func(ev watch.Event) bool {
			c, ok := ev.Object.(*wbv1.TerminalCommand)
			if !ok || !wbv1.CommandIsFinal(c.Status.Conditions) || c.Status.Phase != wbv1.CommandPhaseFor(c.Status.Conditions) {
				return false
			}
			if c.Status.Phase != wbv1.CommandSucceeded {
				mu.Lock()
				failed = append(failed, fmt.Sprintf("%s %s %+v", c.Name, c.Status.Phase, c.Status.Refusal))
				mu.Unlock()
			}
			return true
		})
		if len(failed) > 0 {
			b.Fatalf("%d of %d commands did not succeed: %v", len(failed), n, failed)
		}
		cmdRate = append(cmdRate, float64(n)/d.Seconds())
		cmdCPU = append(cmdCPU, float64((treeCPU()-c0).Milliseconds())/float64(n))
		if busy1, total1 := machineCPU(); total1 > total0 {
			busyFrac = append(busyFrac, float64(busy1-busy0)/float64(total1-total0))
		}
		if rec != nil {
			line := "cpu ms per command by process:"
			for name, d := range treeCPUByName() {
				line += fmt.Sprintf(" %s=%.1f", name, float64((d-byName[name]).Milliseconds())/float64(n))
			}
			b.Log(line)
			peaks = append(peaks, float64(logSteps(b, rec, ns, i, n)))
		}
	}
	median := func(v []float64) float64 {
		s := append([]float64(nil), v...)
		for i := range s { // insertion sort: a handful of values
			for j := i; j > 0 && s[j] < s[j-1]; j-- {
				s[j], s[j-1] = s[j-1], s[j]
			}
		}
		return s[len(s)/2]
	}
	cmd, cm, ex := median(cmdRate), median(cmRate), median(execRate)
	b.ReportMetric(float64(n), "in-flight")
	b.ReportMetric(float64(sessions), "sessions")
	// CPU of the whole process tree (benchmark, manager, agent, API server, etcd, sandboxes)
	// per object: with the machine's cores it bounds the rate whatever runs concurrently.
	b.ReportMetric(median(cmdCPU), "cpu-ms/command")
	b.ReportMetric(median(cmCPU), "cpu-ms/configmap")
	if len(busyFrac) > 0 {
		// The machine's busy fraction (all processes) while the commands were in flight.
		b.ReportMetric(median(busyFrac), "machine-busy")
	}
	if len(peaks) > 0 {
		b.ReportMetric(median(peaks), "peak-on-node")
	}
	b.ReportMetric(cmd, "commands/s")
	b.ReportMetric(cm, "configmaps/s")
	b.ReportMetric(ex, "execs/s")
	b.ReportMetric(cmd/min(cm, ex), "ratio-to-floor")
	b.ReportMetric(0, "ns/op")
}

// inFlight creates n objects (made by mk) with `creators` goroutines and returns the time
// from the first create until a watch of the namespace (opened before) has shown, for each
// of them, an event for which done holds.
func inFlight(ctx context.Context, b *testing.B, cc client.WithWatch, ns string, list client.ObjectList, n int, mk func(int) client.Object, done func(watch.Event) bool) time.Duration {
	b.Helper()
	w, err := cc.Watch(ctx, list, client.InNamespace(ns))
	must(b, err)
	defer w.Stop()
	names := make(map[string]bool, n)
	objs := make([]client.Object, n)
	for j := range objs {
		objs[j] = mk(j)
		names[objs[j].GetName()] = true
	}
	t0 := time.Now()
	work := make(chan client.Object)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for k := 0; k < creators; k++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for o := range work {
				_, isCmd := o.(*wbv1.TerminalCommand)
				if isCmd {
					spans.Mark(o.GetNamespace()+"/"+o.GetName(), "bench-create-sent")
				}
				err := cc.Create(ctx, o)
				if isCmd {
					spans.Mark(o.GetNamespace()+"/"+o.GetName(), "bench-created")
				}
				if err != nil {
					errs <- fmt.Errorf("creating %s: %w", o.GetName(), err)
				}
			}
		}()
	}
	for _, o := range objs {
		work <- o
	}
	close(work)
	wg.Wait()
	close(errs)
	for err := range errs {
		b.Fatal(err)
	}
	deadline := time.After(5 * time.Minute)
	for len(names) > 0 {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				b.Fatalf("watch closed with %d objects not seen done", len(names))
			}
			o, isObj := ev.Object.(client.Object)
			if isObj && names[o.GetName()] && done(ev) {
				if _, isCmd := o.(*wbv1.TerminalCommand); isCmd {
					spans.Mark(o.GetNamespace()+"/"+o.GetName(), "bench-seen-final")
				}
				delete(names, o.GetName())
			}
		case <-deadline:
			b.Fatalf("%d of %d objects not done after 5 minutes", len(names), n)
		}
	}
	return time.Since(t0)
}

// logSteps logs, for each command of iteration i, when each marked step happened relative to
// the first command's first mark (BENCH_THROUGHPUT_SPANS=1): read by eye, it shows whether
// the commands' steps overlap or follow one another. It returns the peak number of commands
// that were at once between the node taking them (node-claim-taken) and their end there
// (node-command-ended): 1 means the node ran them one after another.
func logSteps(b *testing.B, rec *spans.Recorder, ns string, i, n int) int {
	var t0 time.Time
	all := make([][]spans.Point, n)
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	for j := range all {
		all[j] = rec.Take(fmt.Sprintf("%s/t%d-%d", ns, i, j))
		if len(all[j]) > 0 && (t0.IsZero() || all[j][0].At.Before(t0)) {
			t0 = all[j][0].At
		}
		var from, to time.Time
		for _, p := range all[j] {
			switch p.Step {
			case "node-claim-taken":
				from = p.At
			case "node-command-ended":
				to = p.At
			}
		}
		if !from.IsZero() && !to.IsZero() {
			edges = append(edges, edge{from, 1}, edge{to, -1})
		}
	}
	for j, pts := range all {
		line := fmt.Sprintf("t%d-%d:", i, j)
		for _, p := range pts {
			line += fmt.Sprintf(" %s=%dms", p.Step, p.At.Sub(t0).Milliseconds())
		}
		b.Log(line)
	}
	sort.Slice(edges, func(x, y int) bool {
		if edges[x].at.Equal(edges[y].at) {
			return edges[x].delta < edges[y].delta // an end before a start at the same instant
		}
		return edges[x].at.Before(edges[y].at)
	})
	cur, peak := 0, 0
	for _, e := range edges {
		cur += e.delta
		peak = max(peak, cur)
	}
	return peak
}
