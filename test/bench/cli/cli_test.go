// Package cli measures kubectl-workbench end to end: `kubectl workbench run -- /bin/true`
// from process start to exit, against the command's own create → Succeeded measured in the
// same run by an in-process client (create, then watch until the outcome), interleaved.
package cli

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends/guestenv"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/test/stack"
	"sensorium.dev/workbench/internal/test/testkit"
	wbclient "sensorium.dev/workbench/pkg/client"
)

var st *stack.Stack

const ns = "bench"

func TestMain(m *testing.M) {
	procexec.MaybeRunHelper()
	guestenv.MaybeRunRelay() // and as the guest PTY relay of a VM session
	st = stack.StartForMain("cli benchmarks", "./cmd/kubectl-workbench")
	code := m.Run()
	st.Stop()
	os.Exit(code)
}

var benchClient *wbclient.Client

// setup makes the namespace, a /bin/true profile and a Ready environment once per process
// (the benchmark function runs several times while the framework sizes b.N).
func setup(b testing.TB) *wbclient.Client {
	b.Helper()
	if benchClient != nil {
		return benchClient
	}
	ctx := context.Background()
	c := st.Env.Client
	must(b, c.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}))
	must(b, c.Create(ctx, &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "true", Namespace: ns}, Spec: wbv1.CommandProfileSpec{
		Executable: "/bin/true", AllowedRoots: []string{"work"}, MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 16,
		Env: wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}}}}}))
	must(b, c.Create(ctx, &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "echo", Namespace: ns}, Spec: wbv1.CommandProfileSpec{
		Executable: "/bin/echo", FixedArgs: []string{"hello"}, AllowedRoots: []string{"work"}, MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 16,
		Env: wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}}}}}))
	dir, err := os.MkdirTemp(st.Workspace, "bench-")
	must(b, err)
	cl, err := wbclient.New(st.Env.Config, ns)
	must(b, err)
	e, err := wbclient.EnvironmentRequest{Name: "e", Roots: map[string]string{"work": dir}}.Environment(ns)
	must(b, err)
	must(b, cl.CreateEnvironment(ctx, e))
	_, err = cl.WaitEnvironmentReady(ctx, "e", nil)
	must(b, err)
	benchClient = cl
	return cl
}

// BenchmarkRunTrue: each iteration runs the built CLI once (process start → exit, which
// includes loading the kubeconfig, discovery, resolving the environment, session and
// profile, the create, the watch and the output when there is any), then `kubectl create
// configmap` from the same shell (the person's floor: the issue's goal is at most 1.5× it
// plus the command's own run time), then, as the command's floor, creates the same command
// in-process and watches it until Succeeded. Reported: p50 and p90 of each and the ratios
// of the p50s.
func BenchmarkRunTrue(b *testing.B) {
	cl := setup(b)
	ctx := context.Background()
	// BENCH_CLI_BASELINE names another build of the plugin (e.g. the previous commit's) to
	// time in the same loop: before and after a change, same run, same load.
	baseline := os.Getenv("BENCH_CLI_BASELINE")
	runBin := func(bin string) time.Duration {
		start := time.Now()
		cmd := exec.Command(bin, "--kubeconfig", st.Kubeconfig, "-n", ns, "run", "-e", "e", "--", "/bin/true")
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("kubectl workbench run -- /bin/true: %v\n%s", err, out)
		}
		return time.Since(start)
	}
	run := func() time.Duration { return runBin(st.Bin("kubectl-workbench")) }
	floor := func() time.Duration {
		tc, err := cl.PrepareCommand(ctx, wbclient.RunRequest{Environment: "e", Argv: []string{"/bin/true"}})
		must(b, err)
		start := time.Now()
		must(b, cl.CreateCommand(ctx, tc))
		final, err := cl.WaitCommand(ctx, tc.Name, nil, nil)
		must(b, err)
		d := time.Since(start)
		if wbv1.CommandPhaseFor(final.Status.Conditions) != wbv1.CommandSucceeded {
			b.Fatalf("command %s: %+v", tc.Name, final.Status)
		}
		return d
	}
	// The person's floor: `kubectl create configmap` from the same shell, process start to
	// exit (kubectl from the control plane's assets: the same client libraries' release).
	kubectl := filepath.Join(os.Getenv("KUBEBUILDER_ASSETS"), "kubectl")
	if _, err := os.Stat(kubectl); err != nil {
		if kubectl, err = exec.LookPath("kubectl"); err != nil {
			b.Skip("no kubectl next to the control plane's binaries (KUBEBUILDER_ASSETS) nor on PATH: the CLI's floor cannot be measured")
		}
	}
	cms := 0
	kubectlCreate := func() time.Duration {
		cms++
		start := time.Now()
		cmd := exec.Command(kubectl, "--kubeconfig", st.Kubeconfig, "-n", ns, "create", "configmap", fmt.Sprintf("floor-%d-%d", time.Now().UnixNano(), cms))
		if out, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("kubectl create configmap: %v\n%s", err, out)
		}
		return time.Since(start)
	}
	run() // warm up: the session exists from here on
	floor()
	kubectlCreate()
	var cli, cmd, kc, base []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		cli = append(cli, run())
		if baseline != "" {
			base = append(base, runBin(baseline))
		}
		kc = append(kc, kubectlCreate())
		cmd = append(cmd, floor())
	}
	b.StopTimer()
	p := func(s []time.Duration, q float64) float64 {
		s = slices.Clone(s)
		slices.Sort(s)
		return float64(s[int(q*float64(len(s)-1))].Microseconds()) / 1000
	}
	b.ReportMetric(p(cli, 0.5), "cli-p50-ms")
	b.ReportMetric(p(cli, 0.9), "cli-p90-ms")
	b.ReportMetric(p(cmd, 0.5), "create-succeeded-p50-ms")
	b.ReportMetric(p(cmd, 0.9), "create-succeeded-p90-ms")
	b.ReportMetric(p(cli, 0.5)/p(cmd, 0.5), "ratio-p50")
	b.ReportMetric(p(kc, 0.5), "kubectl-create-configmap-p50-ms")
	b.ReportMetric(p(cli, 0.5)/p(kc, 0.5), "cli-to-kubectl-create-p50")
	if len(base) > 0 {
		b.ReportMetric(p(base, 0.5), "baseline-cli-p50-ms")
		b.ReportMetric(p(base, 0.5)/p(kc, 0.5), "baseline-to-kubectl-create-p50")
	}
	b.ReportMetric(0, "ns/op")
	b.Logf("aggregated API served: %v", cl.SubresourcesServed(ctx))
}

// must is the shared testkit.Must.
var must = testkit.Must
