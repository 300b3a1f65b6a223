// Package scale checks docs/scale.md's model of the control plane on this machine: many
// simulated node agents against one API server and one etcd, each the single writer of its
// commands' status, speaking the node's status protocol (the TerminalCommand status
// subresource), with no process run, so what is measured is the control plane alone.
package scale

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	logf "sigs.k8s.io/controller-runtime/pkg/log"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// TestScaleSimulation runs WB_SIM_NODES simulated nodes (default 20), each owning one
// namespace (an environment's commands; the design shards a node's work by namespace) and
// watching it, and WB_SIM_COMMANDS commands per node (default 20) created by
// WB_SIM_CREATORS clients (default 8) with no client-side rate limit. A node answers every
// command it sees created with WB_SIM_STATUS_WRITES status writes (default 1: start and
// outcome in one write, the single-writer path for a short command; 2: a start record,
// then the outcome). It reports the write rate the API server and etcd sustained (creates
// plus status writes per second), commands/s, create → outcome observed p50/p99, watch
// events delivered, etcd bytes in use per command, and checks that none is lost: every
// command ends with its one outcome in the API server.
func TestScaleSimulation(t *testing.T) {
	if os.Getenv("KUBEBUILDER_ASSETS") == "" {
		t.Skip("KUBEBUILDER_ASSETS is not set: no API server to simulate against (make load sets it)")
	}
	nodes, perNode := envInt("WB_SIM_NODES", 20), envInt("WB_SIM_COMMANDS", 20)
	creators, statusWrites := envInt("WB_SIM_CREATORS", 8), envInt("WB_SIM_STATUS_WRITES", 1)
	total := nodes * perNode
	logf.SetLogger(logr.Discard())
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Join(filepath.Dir(file), "..", "..", "..")
	te := &envtest.Environment{CRDDirectoryPaths: []string{filepath.Join(root, "config", "crd", "bases")}, ErrorIfCRDPathMissing: true,
		ControlPlaneStartTimeout: 2 * time.Minute}
	cfg, err := te.Start()
	if err != nil {
		t.Fatalf("starting the control plane: %v", err)
	}
	defer func() { _ = te.Stop() }()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	scheme := kruntime.NewScheme()
	utilruntime.Must(clientgoscheme.AddToScheme(scheme))
	utilruntime.Must(wbv1.AddToScheme(scheme))
	cl, err := client.NewWithWatch(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()

	var written, eventsSeen atomic.Int64
	var mu sync.Mutex
	created := make(map[string]time.Time, total)
	final := make(map[string]time.Time, total)
	var wg sync.WaitGroup
	ready := make(chan struct{}, nodes)
	for k := 0; k < nodes; k++ {
		ns := fmt.Sprintf("sim-%d", k)
		if err := cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
			t.Fatal(err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			simNode(ctx, t, cl, ns, perNode, statusWrites, ready, &written, &eventsSeen, func(name string) {
				mu.Lock()
				final[ns+"/"+name] = time.Now()
				mu.Unlock()
			})
		}()
	}
	for k := 0; k < nodes; k++ {
		<-ready
	}
	dbBefore := etcdInUse(t, te)
	start := time.Now()
	work := make(chan [2]string)
	var cwg sync.WaitGroup
	for c := 0; c < creators; c++ {
		cwg.Add(1)
		go func() {
			defer cwg.Done()
			for w := range work {
				mu.Lock()
				created[w[0]+"/"+w[1]] = time.Now()
				mu.Unlock()
				err := cl.Create(ctx, &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: w[1], Namespace: w[0]},
					Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "true", Argv: []string{"/bin/true"}, Cwd: wbv1.CwdAddress{Root: "repo"}}})
				if err != nil {
					t.Errorf("creating %s/%s: %v", w[0], w[1], err)
					continue
				}
				written.Add(1)
			}
		}()
	}
	for i := 0; i < perNode; i++ {
		for k := 0; k < nodes; k++ {
			work <- [2]string{fmt.Sprintf("sim-%d", k), fmt.Sprintf("c%d", i)}
		}
	}
	close(work)
	cwg.Wait()
	wg.Wait()
	elapsed := time.Since(start)
	dbAfter := etcdInUse(t, te)

	// None lost: every command holds its one outcome in the API server.
	done := 0
	for k := 0; k < nodes; k++ {
		var l wbv1.TerminalCommandList
		if err := cl.List(ctx, &l, client.InNamespace(fmt.Sprintf("sim-%d", k))); err != nil {
			t.Fatal(err)
		}
		for _, c := range l.Items {
			if wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions) && c.Status.Phase == wbv1.CommandSucceeded {
				done++
			}
		}
	}
	if done != total {
		t.Errorf("%d of %d commands hold their outcome", done, total)
	}
	var lat []time.Duration
	for k, at := range final {
		lat = append(lat, at.Sub(created[k]))
	}
	slices.Sort(lat)
	q := func(p float64) time.Duration {
		if len(lat) == 0 {
			return 0
		}
		return lat[min(len(lat)-1, int(p*float64(len(lat))))].Round(time.Millisecond)
	}
	t.Logf("scale simulation: %d nodes × %d commands = %d, %d status write(s) per command, %d creators, GOMAXPROCS %d: "+
		"%d writes in %s = %.0f writes/s sustained, %.1f commands/s; create → outcome observed by its node p50 %s p99 %s; "+
		"%d watch events delivered to the nodes (%.1f per command); etcd in use %+.0f bytes (%.0f per command)",
		nodes, perNode, total, statusWrites, creators, runtime.GOMAXPROCS(0), written.Load(), elapsed.Round(time.Millisecond),
		float64(written.Load())/elapsed.Seconds(), float64(total)/elapsed.Seconds(), q(0.5), q(0.99),
		eventsSeen.Load(), float64(eventsSeen.Load())/float64(total), dbAfter-dbBefore, (dbAfter-dbBefore)/float64(total))
}

// simNode is one node agent's status protocol for its namespace: watch the commands, and
// for each one created write its status (statusWrites writes: the last carries the
// outcome), then report it observed when the watch shows the outcome.
func simNode(ctx context.Context, t *testing.T, cl client.WithWatch, ns string, n, statusWrites int, ready chan<- struct{}, written, events *atomic.Int64, observed func(string)) {
	w, err := cl.Watch(ctx, &wbv1.TerminalCommandList{}, client.InNamespace(ns))
	if err != nil {
		t.Errorf("node %s: watch: %v", ns, err)
		ready <- struct{}{}
		return
	}
	defer w.Stop()
	ready <- struct{}{}
	seen := 0
	for seen < n {
		var ev watch.Event
		select {
		case <-ctx.Done():
			t.Errorf("node %s: %d of %d outcomes observed when the run ended", ns, seen, n)
			return
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Errorf("node %s: watch closed after %d of %d", ns, seen, n)
				return
			}
			ev = e
		}
		events.Add(1)
		c, ok := ev.Object.(*wbv1.TerminalCommand)
		if !ok {
			continue
		}
		switch {
		case ev.Type == watch.Added && len(c.Status.Conditions) == 0:
			for i := 1; i <= statusWrites; i++ {
				now := metav1.Now()
				set := func(typ, reason string) {
					meta.SetStatusCondition(&c.Status.Conditions, metav1.Condition{Type: typ, Status: metav1.ConditionTrue, Reason: reason, Message: "simulated", ObservedGeneration: c.Generation})
				}
				set(wbv1.ConditionAdmitted, "Admitted")
				set(wbv1.ConditionStarted, "Started")
				c.Status.NodeName, c.Status.StartTime, c.Status.DecidedBy = "sim", &now, wbv1.PhaseWriterNode
				if i == statusWrites {
					zero := int32(0)
					set(wbv1.ConditionCompleted, wbv1.ReasonSucceeded)
					c.Status.ExitCode, c.Status.CompletionTime = &zero, &now
				}
				c.Status.Phase = wbv1.CommandPhaseFor(c.Status.Conditions)
				if err := cl.Status().Update(ctx, c); err != nil {
					t.Errorf("node %s: status of %s: %v", ns, c.Name, err)
					break
				}
				written.Add(1)
			}
		case wbv1.CommandIsFinal(c.Status.Conditions):
			seen++
			observed(c.Name)
		}
	}
}

// etcdInUse is etcd's etcd_mvcc_db_total_size_in_use_in_bytes.
func etcdInUse(t *testing.T, te *envtest.Environment) float64 {
	u := te.ControlPlane.Etcd.URL
	if u == nil {
		return 0
	}
	resp, err := http.Get(u.String() + "/metrics")
	if err != nil {
		t.Logf("etcd metrics: %v", err)
		return 0
	}
	defer func() { _ = resp.Body.Close() }()
	body, _ := io.ReadAll(resp.Body)
	for _, line := range strings.Split(string(body), "\n") {
		if v, ok := strings.CutPrefix(line, "etcd_mvcc_db_total_size_in_use_in_bytes "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}
