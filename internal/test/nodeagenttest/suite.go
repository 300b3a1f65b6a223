package nodeagenttest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/util/retry"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/controllers"
	"sensorium.dev/workbench/internal/backends/guestenv"
	"sensorium.dev/workbench/internal/nodeagent/agent"
	"sensorium.dev/workbench/internal/platform/procexec"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/webhooks"
)

// Options describe a suite's bootstrap.
type Options struct {
	// Name is the suite's short name: its SKIP lines say it and its temp directory is
	// /tmp/wb-<Name>-* (keep it short: VM socket paths under the state dir are bounded).
	Name string
	// Env tunes the API server; a nil Env.Setup runs the manager's controllers and webhooks.
	Env envtest.Options
	// Setup runs once the API server, the manager and the suite's directories exist, before
	// the tests. It starts the suite's agents with Suite.StartAgent and registers the
	// teardown of anything else it starts with Suite.Defer. Returning a *SkipError skips the
	// suite.
	Setup func(*Suite) error
}

// Suite is a running bootstrap: a real API server with the manager, a temp directory holding
// the admitted root "work" and the agents' state, and the node agents started through it.
// Stop ends the agents, releases what they left in their cgroups (VMs outlive an agent by
// design), runs the registered teardowns and stops the API server: no suite can forget it.
type Suite struct {
	Env *envtest.Env
	// Ctx ends when the suite stops; the agents run under it.
	Ctx context.Context
	// Dir is the suite's temp directory, removed by Stop.
	Dir string
	// Workspace is Dir/work (created), the usual admitted root "work".
	Workspace string
	// StateDir is Dir/state, the usual state directory of the suite's agent.
	StateDir string

	cancel    context.CancelFunc
	mu        sync.Mutex
	agents    []started
	teardowns []func()
}

type started struct {
	cfg  agent.Config
	done <-chan struct{}
}

// SkipError says why a suite cannot run here; Main prints it as a SKIP line and exits 0.
type SkipError struct{ Reason string }

func (e *SkipError) Error() string { return e.Reason }

// Skip returns a *SkipError for reason.
func Skip(reason string) error { return &SkipError{Reason: reason} }

// ManagerSetup registers the manager's controllers and webhooks, as the manager binary does.
func ManagerSetup(mgr ctrl.Manager) error { return ManagerSetupWith(controllers.Config{})(mgr) }

// ManagerSetupWith is ManagerSetup with the controllers configured by cfg.
func ManagerSetupWith(cfg controllers.Config) func(ctrl.Manager) error {
	return func(mgr ctrl.Manager) error {
		if err := controllers.SetupWithManager(mgr, cfg); err != nil {
			return err
		}
		return webhooks.SetupWithManager(mgr)
	}
}

// Main is the whole TestMain of a suite that runs the manager and node agents: it serves the
// sandbox helper when the agent re-executes the test binary as one, skips without root or
// without a control plane, starts the suite, runs the tests and stops the suite.
func Main(m *testing.M, o Options) {
	procexec.MaybeRunHelper() // the agent re-executes this binary as its sandbox helper
	guestenv.MaybeRunRelay()  // and as the guest PTY relay of a VM environment's session
	if os.Geteuid() != 0 {
		fmt.Fprintf(os.Stderr, "SKIP %s suite: the node agent and its sandboxes need root\n", o.Name)
		os.Exit(0)
	}
	os.Exit(run(m, o))
}

func run(m *testing.M, o Options) int {
	s, err := StartSuite(o)
	var skip *SkipError
	if errors.As(err, &skip) {
		fmt.Fprintf(os.Stderr, "SKIP %s suite: %s\n", o.Name, skip.Reason)
		return 0
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s suite: %v\n", o.Name, err)
		return 1
	}
	defer s.Stop()
	return m.Run()
}

// StartSuite starts what o describes; on error everything started is stopped again. A
// missing control plane is a *SkipError.
func StartSuite(o Options) (*Suite, error) {
	eo := o.Env
	if eo.Setup == nil {
		eo.Setup = ManagerSetup
	}
	env, err := envtest.Start(eo)
	if errors.Is(err, envtest.ErrNoAssets) {
		return nil, Skip(err.Error())
	}
	if err != nil {
		return nil, err
	}
	s := &Suite{Env: env}
	s.Ctx, s.cancel = context.WithCancel(context.Background())
	ok := false
	defer func() {
		if !ok {
			s.Stop()
		}
	}()
	if s.Dir, err = os.MkdirTemp("", "wb-"+o.Name+"-"); err != nil {
		return nil, fmt.Errorf("creating the %s suite's temp dir: %w", o.Name, err)
	}
	s.Workspace, s.StateDir = filepath.Join(s.Dir, "work"), filepath.Join(s.Dir, "state")
	if err := os.MkdirAll(s.Workspace, 0o755); err != nil {
		return nil, fmt.Errorf("creating the %s suite's workspace: %w", o.Name, err)
	}
	if o.Setup != nil {
		if err := o.Setup(s); err != nil {
			return nil, err
		}
	}
	ok = true
	return s, nil
}

// AgentConfig is the usual configuration of a suite's agent named node: state in StateDir,
// root "work" admitted at Workspace, a 5 s heartbeat and a data plane on a free loopback
// port. Callers add caps, QEMU and the rest.
func (s *Suite) AgentConfig(node string) agent.Config {
	return agent.Config{NodeName: node, StateDir: s.StateDir, AdmittedRoots: map[string]string{"work": s.Workspace},
		HeartbeatSeconds: 5, DataPlaneAddress: "127.0.0.1:0"}
}

// StartAgent runs an agent with cfg (cfg.NodeName names the node) until the suite stops;
// Stop waits for it and releases its cgroups.
func (s *Suite) StartAgent(cfg agent.Config, opts agent.Options) (*agent.Agent, error) {
	a, done, err := start(s.Ctx, s.Env, cfg, opts)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	s.agents = append(s.agents, started{cfg: cfg, done: done})
	s.mu.Unlock()
	return a, nil
}

// Defer registers f to run when the suite stops, after its agents ended and before the API
// server stops (last registered, first run).
func (s *Suite) Defer(f func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.teardowns = append(s.teardowns, f)
}

// AgentStopTimeout bounds how long Stop waits for each agent's Run to return.
const AgentStopTimeout = time.Minute

// Stop ends the agents (waiting at most AgentStopTimeout for each) and releases their
// cgroups, runs the teardowns, stops the API server and removes Dir.
func (s *Suite) Stop() {
	s.cancel()
	s.mu.Lock()
	agents, teardowns := s.agents, s.teardowns
	s.agents, s.teardowns = nil, nil
	s.mu.Unlock()
	for _, a := range agents {
		select {
		case <-a.done:
		case <-time.After(AgentStopTimeout):
			fmt.Fprintf(os.Stderr, "the agent of node %s did not stop within %s; releasing its cgroups anyway\n", a.cfg.NodeName, AgentStopTimeout)
		}
		if err := Release(a.cfg); err != nil {
			fmt.Fprintln(os.Stderr, err)
		}
	}
	for i := len(teardowns) - 1; i >= 0; i-- {
		teardowns[i]()
	}
	if s.Env != nil {
		s.Env.Stop()
	}
	if s.Dir != "" {
		_ = os.RemoveAll(s.Dir)
	}
}

// QEMU returns the qemu-microvm.v1 configuration of a test agent — images from the
// repository's bin/guest (built by `make guest-image`), the accelerator pinned to TCG so
// the published isolation class is known (emulated-vm; the KVM probe itself is covered by
// internal/backends/qemumicrovm's tests) — or nil and why this machine cannot boot the
// guest. need names further files of bin/guest the caller requires.
func QEMU(need ...string) (*agent.QEMUConfig, string) {
	bin, _ := filepath.Abs(filepath.Join(envtest.RepoRoot(), "bin"))
	switch {
	case os.Getenv("WORKBENCH_SKIP_VM") == "1":
		return nil, "WORKBENCH_SKIP_VM=1"
	case runtime.GOARCH != "amd64":
		return nil, "the guest image is x86_64; this is " + runtime.GOARCH
	}
	for _, f := range append([]string{"vmlinux", "initramfs.cpio", "vhost-device-vsock"}, need...) {
		if _, err := os.Stat(filepath.Join(bin, "guest", f)); err != nil {
			return nil, fmt.Sprintf("bin/guest/%s missing: run `make guest-image` first (%v)", f, err)
		}
	}
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		return nil, fmt.Sprintf("qemu-system-x86_64 not found (installed by `make guest-image`): %v", err)
	}
	return &agent.QEMUConfig{Enabled: true, ImageDir: bin, Accel: "tcg"}, ""
}

// ImageManifest reads the guest's ImageManifest written by `make guest-image`
// (bin/guest/imagemanifest.yaml where CI builds the image with GUEST_IMAGE_MANIFEST pointing
// there, else config/samples/07_imagemanifest.yaml).
func ImageManifest() (*wbv1.ImageManifest, error) {
	root := envtest.RepoRoot()
	p := filepath.Join(root, "bin", "guest", "imagemanifest.yaml")
	if _, err := os.Stat(p); err != nil {
		p = filepath.Join(root, "config", "samples", "07_imagemanifest.yaml")
	}
	raw, err := os.ReadFile(p)
	if err != nil {
		return nil, fmt.Errorf("reading the guest's ImageManifest: %w", err)
	}
	var im wbv1.ImageManifest
	if err := yaml.UnmarshalStrict(raw, &im); err != nil {
		return nil, fmt.Errorf("parsing the guest's ImageManifest %s: %w", p, err)
	}
	return &im, nil
}

// ApplyImageManifest registers the guest's ImageManifest (ImageManifest) and returns its
// name (ApplyBuiltImageManifest).
func ApplyImageManifest(ctx context.Context, env *envtest.Env) (string, error) {
	im, err := ImageManifest()
	if err != nil {
		return "", err
	}
	return im.Name, ApplyBuiltImageManifest(ctx, env, im)
}

// ApplyBuiltImageManifest makes im, the manifest `make guest-image` wrote next to the image
// it built, the one the API server holds: created, or, where an object of that name exists
// (a committed sample another test applied: a rebuilt image need not match its digests),
// its spec replaced by im's.
func ApplyBuiltImageManifest(ctx context.Context, env *envtest.Env, im *wbv1.ImageManifest) error {
	err := env.Client.Create(ctx, im.DeepCopy())
	if !apierrors.IsAlreadyExists(err) {
		if err != nil {
			return fmt.Errorf("creating ImageManifest %s: %w", im.Name, err)
		}
		return nil
	}
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		var cur wbv1.ImageManifest
		if err := env.Client.Get(ctx, client.ObjectKey{Name: im.Name}, &cur); err != nil {
			return err
		}
		if equality.Semantic.DeepEqual(cur.Spec, im.Spec) {
			return nil
		}
		cur.Spec = *im.Spec.DeepCopy()
		return env.Client.Update(ctx, &cur)
	})
	if err != nil {
		return fmt.Errorf("replacing the spec of ImageManifest %s with the built image's: %w", im.Name, err)
	}
	return nil
}
