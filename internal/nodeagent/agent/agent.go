package agent

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	ctrlconfig "sigs.k8s.io/controller-runtime/pkg/config"
	"sigs.k8s.io/controller-runtime/pkg/event"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/nodeagent/actionruns"
	"sensorium.dev/workbench/internal/nodeagent/artifacts"
	"sensorium.dev/workbench/internal/nodeagent/commands"
	"sensorium.dev/workbench/internal/nodeagent/environments"
	"sensorium.dev/workbench/internal/nodeagent/nodekit"
	"sensorium.dev/workbench/internal/nodeagent/nodereport"
	"sensorium.dev/workbench/internal/nodeagent/recordings"
	"sensorium.dev/workbench/internal/nodeagent/runs"
	"sensorium.dev/workbench/internal/nodeagent/session"
	"sensorium.dev/workbench/internal/nodeagent/sessions"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/nodeagent/terminalviews"
	"sensorium.dev/workbench/internal/nodeagent/waits"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// Version is the agent's version, stamped at build time.
var Version = "v0.1.0-dev"

// FieldManager prefixes the node agent's field managers.
const FieldManager = nodekit.FieldManager

// Agent is one node agent process.
type Agent struct {
	// stopping is set when the agent shuts down: commands it kills then were interrupted by
	// the node, not cancelled by anyone (awaitCommand records them so).
	stopping atomic.Bool
	cfg      Config
	helper   string // this executable (or Options.HelperPath): sandbox helper and guest PTY relay
	store    *store.DB
	backends *backends.Registry
	sessions *session.Manager
	runner   *procexec.Runner
	sandbox  string           // the sandbox helper binary (empty: this executable)
	cgroups  *cgroups.Manager // a group per command, session and VMM
	storage  storage          // disks, /tmp and file-size bounds (storage.go)
	shared   bool             // Options.SharedProcess
	// actionRuns runs ActionRuns (the actionruns room); nil until set up.
	actionRuns *actionruns.Room
	client     client.Client
	reader     client.Reader

	sandboxErr error // why the process sandbox cannot be established on this node (checked by New)

	// Components with their own locks: environments and sessions (registries.go), the
	// commands this process started (internal/nodeagent/runs; the ActionRun controller has a table of
	// its own), and what the node publishes about itself (nodereport.Report).
	envs     *environments.Registry
	sess     *sessions.Registry
	commands *runs.Table[commandOutcome]
	// cmds is the TerminalCommand room (internal/nodeagent/commands), built at setup.
	cmds   *commands.Room
	report *nodereport.Report
	// nodeReport publishes the node's WorkbenchNode, capabilities and free capacity and
	// follows its cordon (the nodereport room); nil until set up.
	nodeReport *nodereport.Room
	// viewHub wakes view streams on changes of views, grants, environments and sessions.
	viewHub terminalviews.Hub
	// views is the views room (terminalviews), built when the controllers are set up.
	views    *terminalviews.Room
	recorder events.EventRecorder

	// mu guards the file watcher and uploads: the artifact UIDs whose
	// upload through the data plane is in progress (dataplane.go).
	mu      sync.Mutex
	uploads map[string]struct{}
	// sessChanged wakes open attach streams to re-check a session (dataplane.go).
	sessChanged nodekit.Broadcaster

	// wake re-queues objects from goroutines (command exits, session phase changes).
	wakeCommands chan event.GenericEvent
	wakeSessions chan event.GenericEvent

	// Waits, probes, patches and artifacts (the waits, probes, filepatches and artifactcapture rooms).
	runCtx                                 context.Context    // Run's context: registered waits live as long as the agent
	engine                                 *waits.Engine      // pending waits, bounded by Caps.PendingWaits
	signals                                waits.Signals      // change signals of the conditions fed from reconcilers
	watcher                                *waits.FileWatcher // inotify, opened by the first file wait
	blobs                                  *artifacts.Store   // <stateDir>/artifacts
	wakeWaits                              chan event.GenericEvent
	wakePatches, wakeArtifacts, wakeProbes chan event.GenericEvent
	// sweepArtifacts kicks the artifact retention sweep (retention.go).
	sweepArtifacts chan struct{}
	// wakeEnvironments re-queues environments (also when the node's cordon changes:
	// report.Cordoned, node_drain.go).
	wakeEnvironments chan event.GenericEvent
	// rec records admitted work of environments with an active Recording (the recordings
	// room), built once the agent has its client.
	rec *recordings.Room
	// shares divide the session and concurrent-command caps by creator (shares.go).
	shares *identityShares
}

// Options tune an agent for tests and embedding.
type Options struct {
	// Backends overrides the default backend set.
	Backends []backends.Backend
	// HelperPath is the sandbox helper binary (default: this executable).
	HelperPath string
	// SharedProcess lets this agent run beside another one in the same process (tests
	// that need a second node with its own configuration): controller names may repeat.
	SharedProcess bool
}

// New opens the store and prepares the runtime. Nothing runs until Run.
func New(cfg Config, opts Options) (*Agent, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	for _, d := range []string{cfg.StateDir, filepath.Join(cfg.StateDir, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("creating state dir %s: %w", d, err)
		}
	}
	st, err := resolveStorage(cfg)
	if err != nil {
		return nil, err
	}
	db, err := store.Open(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	cg, err := newCgroups(cfg)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	bs := opts.Backends
	if bs == nil {
		if bs, err = defaultBackends(cfg, cg, st); err != nil {
			_ = db.Close()
			return nil, err
		}
	}
	reg, err := backends.NewRegistry(bs...)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	blobs, err := artifacts.Open(filepath.Join(cfg.StateDir, "artifacts"))
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	caps := cfg.Caps
	shares, err := newIdentityShares(caps, cfg.SessionShares, cfg.CommandShares)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	helper := opts.HelperPath
	if helper == "" {
		if helper, err = os.Executable(); err != nil {
			_ = db.Close()
			return nil, fmt.Errorf("locating the agent executable: %w", err)
		}
	}
	a := &Agent{
		cfg: cfg, helper: helper, store: db, backends: reg,
		sessions: session.NewManager(session.Caps{
			Sessions: caps.Sessions, SessionsPerEnvironment: caps.SessionsPerEnvironment, ReaderTasks: caps.ReaderTasks,
			InputQueueDepth: caps.InputQueueDepth, EventBufferDepth: caps.EventBufferDepth,
			PrestartedSessions: caps.PrestartedSessions, // negative: off (session.Caps)
		}, session.WithCgroups(cg), session.WithSandbox(session.Sandbox{HelperPath: sandboxHelper(cfg, opts), TempBase: filepath.Join(cfg.StateDir, "tmp"),
			TempBytes: st.tmpBytes})),
		sandbox: sandboxHelper(cfg, opts),
		runner: procexec.NewRunner(procexec.Limits{MaxConcurrent: caps.ConcurrentCommands, TempBase: filepath.Join(cfg.StateDir, "tmp"), TempBytes: st.tmpBytes,
			HelperPath: sandboxHelper(cfg, opts), Cgroups: cg, PrestartedSandboxes: caps.prestartedSandboxes(),
			RefillByCaller: true}), // the command controller refills once an outcome is written
		cgroups:          cg,
		storage:          st,
		shared:           opts.SharedProcess,
		envs:             environments.NewRegistry(),
		sess:             sessions.NewRegistry(),
		commands:         runs.NewTable[commandOutcome]("command", db),
		report:           nodereport.NewReport(),
		wakeCommands:     make(chan event.GenericEvent, 1024),
		wakeSessions:     make(chan event.GenericEvent, 1024),
		engine:           waits.NewEngine(waits.Caps{PendingWaits: caps.PendingWaits}),
		blobs:            blobs,
		wakeWaits:        make(chan event.GenericEvent, 1024),
		sweepArtifacts:   make(chan struct{}, 1),
		wakeEnvironments: make(chan event.GenericEvent, 1024),
		shares:           shares,
		wakePatches:      make(chan event.GenericEvent, 1024),
		wakeArtifacts:    make(chan event.GenericEvent, 1024),
		wakeProbes:       make(chan event.GenericEvent, 1024),
	}
	// Before anything runs (and before recovery sweeps the temp dirs): can this node
	// establish the process sandbox? The answer is published on the host backends'
	// capabilities; every start fails closed on its own anyway.
	a.sandboxErr = procexec.CheckSandbox(procexec.StartOptions{HelperPath: a.sandbox}, filepath.Join(cfg.StateDir, "tmp"))
	return a, nil
}

// Scheme returns the scheme the agent's clients use.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(s) // TokenReview, SubjectAccessReview, events
	_ = wbv1.AddToScheme(s)
	return s
}

// cacheOptions restrict every watch to this node's objects: a label selector on the node
// label for namespaced kinds and the agent's own capabilities, the node's own name for its
// WorkbenchNode. The agent never lists cluster-wide. Cached objects are stored without
// their managedFields: nothing in the agent reads them from the cache (field ownership is
// read from the API server), and the cache's copies stay a fraction of the objects' size.
func (a *Agent) cacheOptions() cache.Options {
	sel := labels.SelectorFromSet(labels.Set{wbv1.NodeLabel: a.cfg.NodeName})
	byLabel := cache.ByObject{Label: sel}
	return cache.Options{ByObject: map[client.Object]cache.ByObject{
		&wbv1.Environment{}:       byLabel,
		&wbv1.TerminalSession{}:   byLabel,
		&wbv1.TerminalCommand{}:   byLabel,
		&wbv1.Wait{}:              byLabel,
		&wbv1.Probe{}:             byLabel,
		&wbv1.FilePatch{}:         byLabel,
		&wbv1.Artifact{}:          byLabel,
		&wbv1.Recording{}:         byLabel,
		&wbv1.BackendCapability{}: byLabel,
		&wbv1.ActionRun{}:         byLabel,
		&wbv1.TerminalView{}:      byLabel,
		&wbv1.ViewGrant{}:         byLabel,
		&wbv1.WorkbenchNode{}:     {Field: fields.OneTermEqualSelector("metadata.name", a.cfg.NodeName)},
		&corev1.Node{}:            {Field: fields.OneTermEqualSelector("metadata.name", a.cfg.NodeName)},
	}, DefaultTransform: cache.TransformStripManagedFields()}
}

// Run sweeps what a previous process left, then reconciles until ctx ends.
func (a *Agent) Run(ctx context.Context, cfg *rest.Config) error {
	log := ctrl.LoggerFrom(ctx).WithValues("node", a.cfg.NodeName)
	a.runCtx = ctx
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		Scheme: Scheme(), Cache: a.cacheOptions(),
		Metrics: metricsserver.Options{BindAddress: "0"}, HealthProbeBindAddress: "0",
		Controller: ctrlconfig.Controller{SkipNameValidation: &a.shared},
	})
	if err != nil {
		return fmt.Errorf("creating node agent manager: %w", err)
	}
	a.client, a.reader = mgr.GetClient(), mgr.GetAPIReader()
	a.recorder = mgr.GetEventRecorder("workbench-node-agent")
	a.rec = a.newRecordings()

	log.Info("Sweeping what a previous agent process left")
	if err := a.recover(ctx); err != nil {
		return fmt.Errorf("recovery sweep: %w", err)
	}
	if a.sandboxErr == nil {
		// After the sweep (which removes every command group a previous process left).
		if err := a.runner.Warm(); err != nil {
			return err
		}
		a.sessions.RefillPrestarted() // in the background, like the runner's
	}
	if err := a.setupControllers(mgr); err != nil {
		return err
	}
	if err := mgr.Add(managerRunnable(func(ctx context.Context) error {
		if err := a.startDataPlane(ctx); err != nil {
			return err
		}
		return a.nodeReport.PublishLoop(ctx)
	})); err != nil {
		return err
	}
	if err := mgr.Add(managerRunnable(a.artifactSweepLoop)); err != nil {
		return err
	}
	if err := mgr.Add(managerRunnable(a.nodeReport.CapacityLoop)); err != nil {
		return err
	}
	if err := mgr.Add(managerRunnable(a.pendingLoop)); err != nil { // republish.go
		return err
	}
	log.Info("Starting node agent", "version", Version, "backends", a.backends.IDs())
	err = mgr.Start(ctx)
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a.shutdown(shutdown)
	return err
}

// shutdown stops every process the agent runs; it leaves store records so a restart knows
// what was interrupted.
func (a *Agent) shutdown(ctx context.Context) {
	a.stopping.Store(true)
	// Wait for an action-class probe in flight; none starts after this.
	a.actionRuns.StopProbing(ctx)
	a.runner.Close() // idle pre-started sandboxes and their groups
	_ = a.sessions.Shutdown(ctx)
	ending := a.commands.Shutdown() // a guest command stops being waited for; the store keeps it interrupted
	// Once the commands' cgroups are gone, an agent with no VM left removes its cgroup
	// parent (best effort, bounded by ctx).
	for _, h := range ending {
		select {
		case <-h.Done():
		case <-ctx.Done():
		}
	}
	if a.cgroups != nil {
		a.cgroups.RemoveParent()
	}
	_ = a.store.Close()
}

type managerRunnable func(ctx context.Context) error

func (f managerRunnable) Start(ctx context.Context) error { return f(ctx) }

// sandboxHelper picks the sandbox helper binary: the option, the configuration, a
// workbench-sandbox next to this executable, or (empty) this executable itself.
func sandboxHelper(cfg Config, opts Options) string {
	if opts.HelperPath != "" {
		return opts.HelperPath
	}
	if cfg.SandboxHelper != "" {
		return cfg.SandboxHelper
	}
	if exe, err := os.Executable(); err == nil {
		sibling := filepath.Join(filepath.Dir(exe), "workbench-sandbox")
		if fi, err := os.Stat(sibling); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return sibling
		}
	}
	return ""
}
