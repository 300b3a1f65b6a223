package nodeagent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// BenchmarkCommandAPICost measures what one command costs the control plane on the current
// path (manager, webhooks and node agent in this process, one API server, one etcd): API
// writes per command (kube-apiserver's apiserver_request_total, mutating verbs, by
// resource and subresource), watch events per command (one watch of the namespace's
// TerminalCommands: every watcher of the kind — the manager, the agent, each client —
// receives as many), and etcd bytes per command (etcd's
// etcd_mvcc_db_total_size_in_use_in_bytes before and after, and the final object's
// size). Each iteration runs BENCH_THROUGHPUT_N commands of /bin/true in flight.
// docs/scale.md builds its model from these figures.
func BenchmarkCommandAPICost(b *testing.B) {
	ctx := context.Background()
	ns := setup(b)
	n := throughputN()
	kc, err := kubernetes.NewForConfig(env.Config)
	must(b, err)
	var writes, notStored, cmdWrites, statusWrites, events, dbBytes, objBytes, oneWrite float64
	shapes := map[string]int{}
	for i := 0; i < b.N; i++ {
		// The watch starts at the namespace's current resourceVersion: a watch without one
		// first replays every existing object as Added (the earlier iterations' commands),
		// which is not a write of this iteration.
		var cur wbv1.TerminalCommandList
		must(b, wc.List(ctx, &cur, client.InNamespace(ns)))
		w, err := wc.Watch(ctx, &wbv1.TerminalCommandList{}, client.InNamespace(ns),
			&client.ListOptions{Raw: &metav1.ListOptions{ResourceVersion: cur.ResourceVersion}})
		must(b, err)
		before := apiWrites(b, kc)
		dbBefore := etcdInUse(b)
		seen := 0
		prefix := fmt.Sprintf("a%d-", i)
		counted := make(chan int, 1)
		versions := map[string][]string{} // command → what each of its versions carried, in order
		prev := map[string]*wbv1.TerminalCommand{}
		var rewrites []string // what changed in a version that kept its predecessor's phase and conditions
		go func() {
			c := 0
			for ev := range w.ResultChan() {
				tc, ok := ev.Object.(*wbv1.TerminalCommand)
				if !ok || !strings.HasPrefix(tc.Name, prefix) || (ev.Type != watch.Added && ev.Type != watch.Modified) {
					continue
				}
				c++
				content := versionContent(tc)
				if vs := versions[tc.Name]; len(vs) > 0 && vs[len(vs)-1] == content && len(rewrites) < 3 {
					rewrites = append(rewrites, tc.Name+": "+statusChange(prev[tc.Name], tc))
				}
				versions[tc.Name] = append(versions[tc.Name], content)
				prev[tc.Name] = tc
			}
			counted <- c
		}()
		d := inFlight(ctx, b, wc, ns, &wbv1.TerminalCommandList{}, n, func(j int) client.Object {
			return &wbv1.TerminalCommand{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("a%d-%d", i, j), Namespace: ns},
				Spec: wbv1.TerminalCommandSpec{SessionRef: "s", ProfileRef: "true", Argv: []string{"/bin/true"}, Cwd: wbv1.CwdAddress{Root: "repo"}}}
		}, func(ev watch.Event) bool {
			c, ok := ev.Object.(*wbv1.TerminalCommand)
			return ok && wbv1.CommandIsFinal(c.Status.Conditions) && c.Status.Phase == wbv1.CommandPhaseFor(c.Status.Conditions)
		})
		_ = d
		// Writes after the final status (a late Running, a rewrite of the outcome) count
		// too: the window closes a settle time after the last command was seen final.
		time.Sleep(apiCostSettle())
		after := apiWrites(b, kc)
		dbAfter := etcdInUse(b)
		w.Stop()
		seen = <-counted
		for _, r := range rewrites {
			b.Logf("same-shape rewrite %s", r)
		}
		for _, vs := range versions {
			shapes[strings.Join(vs, " → ")]++
			if len(vs) == 2 {
				oneWrite++
			}
		}
		var last wbv1.TerminalCommand
		must(b, wc.Get(ctx, client.ObjectKey{Namespace: ns, Name: fmt.Sprintf("a%d-0", i)}, &last))
		raw, err := json.Marshal(&last)
		must(b, err)
		all := 0.0
		for k, v := range after {
			delta := v - before[k]
			if strings.HasPrefix(k, "(not stored)") {
				notStored += delta
				continue
			}
			all += delta
			if strings.HasPrefix(k, "terminalcommands/") {
				cmdWrites += delta
				if strings.HasPrefix(k, "terminalcommands/status") {
					statusWrites += delta
				}
			}
		}
		writes += all
		events += float64(seen)
		dbBytes += dbAfter - dbBefore
		objBytes += float64(len(raw))
		b.Logf("iteration %d: %d commands; terminalcommand writes by verb and subresource: %v", i, n, deltas(before, after, ""))
	}
	per := float64(b.N * n)
	b.ReportMetric(cmdWrites/per, "tc-writes/cmd")
	b.ReportMetric(statusWrites/per, "tc-status-writes/cmd")
	b.ReportMetric(writes/per, "all-writes/cmd")
	b.ReportMetric(notStored/per, "not-stored-requests/cmd")
	b.ReportMetric(events/per, "watch-events/cmd")
	b.ReportMetric(dbBytes/per, "etcd-inuse-bytes/cmd")
	b.ReportMetric(objBytes/float64(b.N), "object-bytes")
	b.ReportMetric(oneWrite/per, "one-status-write-share")
	for shape, k := range shapes {
		b.Logf("%3d commands: %s", k, shape)
	}
	b.ReportMetric(0, "ns/op")
}

// versionContent names what one version of a command carried: its phase, the conditions
// it shows True (Admitted, Started, Completed) and who decided it.
func versionContent(tc *wbv1.TerminalCommand) string {
	if tc.Status.Phase == "" && len(tc.Status.Conditions) == 0 {
		return "create"
	}
	var conds []string
	for _, t := range []string{wbv1.ConditionAdmitted, wbv1.ConditionStarted, wbv1.ConditionCompleted} {
		if meta.IsStatusConditionTrue(tc.Status.Conditions, t) {
			conds = append(conds, t)
		}
	}
	return fmt.Sprintf("%s[%s by %s]", tc.Status.Phase, strings.Join(conds, ","), tc.Status.DecidedBy)
}

// statusChange names what differs between two versions of a command's status: the
// top-level fields, and each condition whose status, reason, message or transition time moved.
func statusChange(a, b *wbv1.TerminalCommand) string {
	var out []string
	ja, _ := json.Marshal(a.Status)
	jb, _ := json.Marshal(b.Status)
	var ma, mb map[string]any
	_ = json.Unmarshal(ja, &ma)
	_ = json.Unmarshal(jb, &mb)
	for k, v := range mb {
		if k == "conditions" {
			continue
		}
		if fmt.Sprint(ma[k]) != fmt.Sprint(v) {
			out = append(out, k)
		}
	}
	for k := range ma {
		if _, ok := mb[k]; !ok {
			out = append(out, "-"+k)
		}
	}
	for _, ca := range a.Status.Conditions {
		if meta.FindStatusCondition(b.Status.Conditions, ca.Type) == nil {
			out = append(out, "-"+ca.Type)
		}
	}
	if !reflect.DeepEqual(a.Labels, b.Labels) || !reflect.DeepEqual(a.Annotations, b.Annotations) || !reflect.DeepEqual(a.Finalizers, b.Finalizers) {
		out = append(out, "metadata (labels, annotations or finalizers)")
	}
	for _, m := range b.ManagedFields {
		out = append(out, fmt.Sprintf("manager %s/%s %s at %s", m.Manager, m.Subresource, m.Operation, m.Time.Format("15:04:05")))
	}
	for _, cb := range b.Status.Conditions {
		ca := meta.FindStatusCondition(a.Status.Conditions, cb.Type)
		switch {
		case ca == nil:
			out = append(out, "+"+cb.Type)
		case ca.Status != cb.Status || ca.Reason != cb.Reason || ca.Message != cb.Message || !ca.LastTransitionTime.Equal(&cb.LastTransitionTime):
			out = append(out, fmt.Sprintf("%s(%q→%q, %s→%s)", cb.Type, ca.Message, cb.Message, ca.LastTransitionTime.Format("15:04:05"), cb.LastTransitionTime.Format("15:04:05")))
		}
	}
	return strings.Join(out, ", ")
}

// apiCostSettle is how long BenchmarkCommandAPICost keeps counting after every command was
// seen final (BENCH_APICOST_SETTLE, a Go duration; default 2 s, past the node's Running delay).
func apiCostSettle() time.Duration {
	if d, err := time.ParseDuration(os.Getenv("BENCH_APICOST_SETTLE")); err == nil {
		return d
	}
	return 2 * time.Second
}

// apiWrites reads kube-apiserver's apiserver_request_total and returns the mutating
// requests by "resource/subresource verb code"; those that store nothing are keyed with a
// "(not stored)" prefix.
func apiWrites(b *testing.B, kc kubernetes.Interface) map[string]float64 {
	b.Helper()
	raw, err := kc.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	must(b, err)
	out := map[string]float64{}
	sc := bufio.NewScanner(strings.NewReader(string(raw)))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "apiserver_request_total{") {
			continue
		}
		labels, value := parseSample(line)
		switch labels["verb"] {
		case "POST", "PUT", "PATCH", "DELETE", "APPLY", "DELETECOLLECTION":
		default:
			continue
		}
		// Reviews (subjectaccessreviews, tokenreviews) are answered, never stored; a refused
		// write (409 conflict, 4xx) stores nothing either: both are kept apart as "(not stored)".
		if labels["resource"] == "" {
			continue
		}
		if strings.HasSuffix(labels["resource"], "reviews") || !strings.HasPrefix(labels["code"], "2") {
			out["(not stored) "+labels["resource"]+"/"+labels["subresource"]+" "+labels["verb"]+" "+labels["code"]] += value
			continue
		}
		out[labels["resource"]+"/"+labels["subresource"]+" "+labels["verb"]+" "+labels["code"]] += value
	}
	return out
}

func deltas(before, after map[string]float64, prefix string) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if strings.HasPrefix(k, prefix) && v-before[k] != 0 {
			out[k] = v - before[k]
		}
	}
	return out
}

// parseSample splits a Prometheus text sample `name{a="x",b="y"} value`.
func parseSample(line string) (map[string]string, float64) {
	open, end := strings.IndexByte(line, '{'), strings.LastIndexByte(line, '}')
	labels := map[string]string{}
	for _, kv := range strings.Split(line[open+1:end], ",") {
		k, v, ok := strings.Cut(kv, "=")
		if ok {
			labels[k] = strings.Trim(v, `"`)
		}
	}
	v, _ := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
	return labels, v
}

// etcdInUse is etcd's etcd_mvcc_db_total_size_in_use_in_bytes (its /metrics on the client
// URL the test control plane started it with).
func etcdInUse(b *testing.B) float64 {
	b.Helper()
	u := env.Env.ControlPlane.Etcd.URL
	if u == nil {
		b.Skip("the test control plane did not expose etcd's URL")
	}
	resp, err := http.Get(u.String() + "/metrics")
	must(b, err)
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(resp.Body)
	must(b, err)
	for _, line := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(line, "etcd_mvcc_db_total_size_in_use_in_bytes ") {
			v, _ := strconv.ParseFloat(strings.TrimSpace(strings.TrimPrefix(line, "etcd_mvcc_db_total_size_in_use_in_bytes")), 64)
			return v
		}
	}
	b.Fatal("etcd metrics carry no etcd_mvcc_db_total_size_in_use_in_bytes")
	return 0
}

// BenchmarkSessionEnvironmentAPICost is BenchmarkCommandAPICost for the other two units of
// docs/scale.md's model: one Environment (host-local, created until Ready) and one
// TerminalSession on it (created until Running), each iteration measuring API writes
// (all resources, mutating verbs) and etcd bytes in use for each.
func BenchmarkSessionEnvironmentAPICost(b *testing.B) {
	ctx := context.Background()
	ns := setup(b)
	kc, err := kubernetes.NewForConfig(env.Config)
	must(b, err)
	var envWrites, envBytes, sesWrites, sesBytes float64
	sum := func(before, after map[string]float64) float64 {
		t := 0.0
		for k, v := range after {
			if !strings.HasPrefix(k, "(not stored)") {
				t += v - before[k]
			}
		}
		return t
	}
	for i := 0; i < b.N; i++ {
		work, err := os.MkdirTemp(admitted, "ws-")
		must(b, err)
		name := fmt.Sprintf("cost-%d", i)
		before, db0 := apiWrites(b, kc), etcdInUse(b)
		must(b, env.Client.Create(ctx, &wbv1.Environment{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: wbv1.EnvironmentSpec{
			Backend: wbv1.BackendHostLocal, Roots: []wbv1.EnvironmentRoot{{Name: "repo", HostPath: &work}},
			NodeSelector: map[string]string{wbv1.NodeLabel: node}}}))
		waitUntil(b, func() bool {
			var e wbv1.Environment
			must(b, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &e))
			return e.Status.Phase == wbv1.EnvironmentReady
		})
		mid, db1 := apiWrites(b, kc), etcdInUse(b)
		must(b, env.Client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: wbv1.TerminalSessionSpec{EnvironmentRef: wbv1.ObjectName(name)}}))
		waitUntil(b, func() bool {
			var s wbv1.TerminalSession
			must(b, env.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, &s))
			return s.Status.Phase == wbv1.SessionRunning
		})
		after, db2 := apiWrites(b, kc), etcdInUse(b)
		envWrites += sum(before, mid)
		sesWrites += sum(mid, after)
		envBytes += db1 - db0
		sesBytes += db2 - db1
		b.Logf("environment %s: writes %v", name, deltas(before, mid, ""))
		b.Logf("session %s: writes %v", name, deltas(mid, after, ""))
	}
	b.ReportMetric(envWrites/float64(b.N), "env-writes")
	b.ReportMetric(envBytes/float64(b.N), "env-etcd-inuse-bytes")
	b.ReportMetric(sesWrites/float64(b.N), "session-writes")
	b.ReportMetric(sesBytes/float64(b.N), "session-etcd-inuse-bytes")
	b.ReportMetric(0, "ns/op")
}

// waitUntil polls cond (a benchmark's setup wait, bounded at 2 minutes).
func waitUntil(b *testing.B, cond func() bool) {
	b.Helper()
	deadline := time.Now().Add(2 * time.Minute)
	for !cond() {
		if time.Now().After(deadline) {
			b.Fatal("condition not reached in 2 minutes")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
