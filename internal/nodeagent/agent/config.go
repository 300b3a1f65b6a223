// Package agent is the node agent: it reconciles the environments, sessions, commands,
// waits, probes, patches and artifacts bound to its own node toward their spec, keeps a
// metadata store for crash recovery, publishes its WorkbenchNode and honest
// BackendCapability objects, and serves the node data plane.
package agent

import (
	"fmt"
	"os"
	"path/filepath"
	"time"

	"sigs.k8s.io/yaml"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/nodeagent/environments"
	"sensorium.dev/workbench/internal/nodeagent/session"
)

// Config is the node agent's own configuration file. Admitted roots come from here, never
// from the cluster: an Environment's hostPath must lie inside one of them.
type Config struct {
	// NodeName is the node this agent acts for (from NODE_NAME when empty).
	NodeName string `json:"nodeName,omitempty"`
	// StateDir holds the store, managed copies, artifacts and temp roots.
	StateDir string `json:"stateDir"`
	// AdmittedRoots maps a name to an absolute host directory.
	AdmittedRoots map[string]string `json:"admittedRoots,omitempty"`
	// RootSharing is whether two Environments may bind overlapping host directories on
	// this node: None (the default: one Environment per host tree) or ReadOnly (only
	// when every one of them binds it read-only). A read-write binding is always
	// exclusive (actuation.CheckHostTenancy, root-in-use).
	RootSharing actuation.RootSharing `json:"rootSharing,omitempty"`
	// Caps bound the node.
	Caps Caps `json:"caps,omitempty"`
	// DataPlaneAddress is where the HTTPS data plane listens ("" disables it).
	DataPlaneAddress string `json:"dataPlaneAddress,omitempty"`
	// DataPlaneHosts are the names/IPs in the data plane's serving certificate.
	DataPlaneHosts []string `json:"dataPlaneHosts,omitempty"`
	// DataPlaneForwardingCAFile is the PEM CA of the aggregated API server's client
	// certificate: only a certificate it signed (with a name in DataPlaneForwardingNames,
	// when set) may forward an end user's identity to the data plane ("" disables it).
	DataPlaneForwardingCAFile string   `json:"dataPlaneForwardingCAFile,omitempty"`
	DataPlaneForwardingNames  []string `json:"dataPlaneForwardingNames,omitempty"`
	// DataPlaneStreams shares out the data plane's long-lived stream slots (long-polls,
	// follows, attaches, view streams) by identity class; unset fields take the data
	// plane's defaults (dataplane.Limits).
	DataPlaneStreams StreamShares `json:"dataPlaneStreams,omitempty"`
	// SessionShares and CommandShares share out caps.sessions and caps.concurrentCommands
	// by the creator of the session or command (spec.createdBy): a reserve only operators
	// take and a per-identity share for everyone else (shares.go; unset fields take the
	// streams' defaults). Absent: not shared (opt-in, shares.go says why).
	SessionShares *CapShares `json:"sessionShares,omitempty"`
	CommandShares *CapShares `json:"commandShares,omitempty"`
	// SandboxHelper is the sandbox helper binary (cmd/workbench-sandbox). Empty: a
	// workbench-sandbox next to the agent's executable, else the agent binary itself.
	SandboxHelper string `json:"sandboxHelper,omitempty"`
	// CapacityPublishMillis is the least time between two writes of the WorkbenchNode's
	// free capacity (status.free; default 1000).
	CapacityPublishMillis int `json:"capacityPublishMillis,omitempty"`
	// HeartbeatSeconds is the WorkbenchNode heartbeat period.
	HeartbeatSeconds int `json:"heartbeatSeconds,omitempty"`
	// Cgroups configures the cgroups of host processes (default parent: see CgroupsConfig).
	Cgroups *CgroupsConfig `json:"cgroups,omitempty"`
	// QEMU enables the qemu-microvm.v1 backend (absent or enabled: false: not offered).
	QEMU *QEMUConfig `json:"qemu,omitempty"`
	// Storage bounds environment disks, sandbox /tmp and file sizes (storage.go).
	Storage *StorageConfig `json:"storage,omitempty"`
	// Sources is the node's workspace-source policy (environments/sources.go): the hosts git and OCI
	// sources may be fetched from, and the bounds of a materialized root. Absent: only
	// archive sources (uploaded Artifacts) are materialized.
	Sources *SourcesConfig `json:"sources,omitempty"`
	// RecordRetentionSeconds is how long the store keeps the record of an object that no
	// longer exists (default 60); the sweep that prunes them runs at least this often.
	RecordRetentionSeconds int `json:"recordRetentionSeconds,omitempty"`
}

func (c Config) recordRetention() time.Duration {
	if c.RecordRetentionSeconds > 0 {
		return time.Duration(c.RecordRetentionSeconds) * time.Second
	}
	return time.Minute
}

// QEMUConfig configures the qemu-microvm.v1 backend (internal/backends/qemumicrovm).
type QEMUConfig struct {
	Enabled bool `json:"enabled"`
	// ImageDir is where ImageManifest variant paths resolve (e.g. the bin/ of a checkout
	// after make guest-image: guest/vmlinux, guest/initramfs.cpio).
	ImageDir string `json:"imageDir"`
	// QEMUBinary and VhostDeviceVsock: absolute paths or names in PATH (defaults
	// qemu-system-x86_64; vhost-device-vsock, else <imageDir>/guest/vhost-device-vsock).
	QEMUBinary       string `json:"qemuBinary,omitempty"`
	VhostDeviceVsock string `json:"vhostDeviceVsock,omitempty"`
	// Accel is auto (default: KVM only if a probe VM boots under it), kvm or tcg.
	Accel string `json:"accel,omitempty"`
	// MaxVMs bounds the VMs of the node (default 4).
	MaxVMs int `json:"maxVMs,omitempty"`
	// MaxMemoryMiB bounds one guest's memory (default 8192). With the VMs' QEMU processes
	// in the agent pod's cgroup, the pod's memory limit must hold maxVMs guests of this
	// size plus their VMM overhead (config/nodeagent/vm sizes it).
	MaxMemoryMiB int32 `json:"maxMemoryMiB,omitempty"`
}

// StreamShares: Streams is the node-wide cap of stream slots (default
// dataplane.DefaultMaxLongPolls), OperatorReserve the slots only operators (the
// node-operator binding) take (default a quarter), PerIdentity the most one agent, viewer
// or view grantee holds at once (default half of the rest). A caller past its share is
// refused with share-cap-reached, past the cap with queue-full.
type StreamShares struct {
	Streams         int `json:"streams,omitempty"`
	OperatorReserve int `json:"operatorReserve,omitempty"`
	PerIdentity     int `json:"perIdentity,omitempty"`
}

// Caps are the node's configurable bounds; unset ones take node-sized defaults (capacity.go).
type Caps struct {
	Sessions               int `json:"sessions,omitempty"`
	SessionsPerEnvironment int `json:"sessionsPerEnvironment,omitempty"`
	ReaderTasks            int `json:"readerTasks,omitempty"`
	InputQueueDepth        int `json:"inputQueueDepth,omitempty"`
	EventBufferDepth       int `json:"eventBufferDepth,omitempty"`
	PendingWaits           int `json:"pendingWaits,omitempty"`
	ConcurrentCommands     int `json:"concurrentCommands,omitempty"`
	// PrestartedSandboxes is how many command sandboxes the agent keeps started ahead
	// (procexec/prestart.go), refilled only while no command is starting. Unset (0) selects
	// DefaultPrestartedSandboxes; a negative value turns the pool off
	// (docs/benchmarks.md has the figures).
	PrestartedSandboxes int `json:"prestartedSandboxes,omitempty"`
	// PrestartedSessions is how many session sandboxes (a helper on a PTY of its own) the
	// agent keeps started ahead (session/prestart.go, the same procexec.Pool), refilled
	// only while no session is starting. Unset (0) selects DefaultPrestartedSessions, at
	// most session.MaxPrestartedSessions; a negative value turns the pool off.
	PrestartedSessions int `json:"prestartedSessions,omitempty"`
}

// Defaults (sessions, reader tasks and concurrent commands are node-sized: capacity.go).
const (
	DefaultInputQueueDepth  = 256
	DefaultEventBufferDepth = 1000
	DefaultPendingWaits     = 1000
	DefaultHeartbeat        = 30 * time.Second
	// DefaultPrestartedSandboxes: two helpers, so two commands started back to back both
	// find one while the first refill waits for the node to be idle.
	DefaultPrestartedSandboxes = 2
	// DefaultPrestartedSessions: two session helpers (docs/benchmarks.md, "Terminal output
	// throughput": the open no longer pays the helper's start).
	DefaultPrestartedSessions = session.DefaultPrestartedSessions
)

// prestartedSandboxes is the pool size the runner gets: 0 when the pool is off.
func (c Caps) prestartedSandboxes() int { return max(c.PrestartedSandboxes, 0) }

// orDefaultKeepNegative is orDefault for a cap whose negative value means "off": it stays
// negative, so defaulting twice never turns it back on.
func orDefaultKeepNegative(v, d int) int {
	if v == 0 {
		return d
	}
	return v
}

func orDefault(v, d int) int {
	if v <= 0 {
		return d
	}
	return v
}

// withDefaults fills unset caps: the node-sized defaults of capacity.go for sessions,
// reader tasks and commands, the constants above for the rest.
func (c Caps) withDefaults() Caps {
	return c.withDefaultsFrom(hostCaps())
}

func (c Caps) withDefaultsFrom(node Caps) Caps {
	return Caps{
		Sessions:               orDefault(c.Sessions, node.Sessions),
		SessionsPerEnvironment: orDefault(c.SessionsPerEnvironment, node.SessionsPerEnvironment),
		ReaderTasks:            orDefault(c.ReaderTasks, node.ReaderTasks),
		InputQueueDepth:        orDefault(c.InputQueueDepth, DefaultInputQueueDepth),
		EventBufferDepth:       orDefault(c.EventBufferDepth, DefaultEventBufferDepth),
		PendingWaits:           orDefault(c.PendingWaits, DefaultPendingWaits),
		ConcurrentCommands:     orDefault(c.ConcurrentCommands, node.ConcurrentCommands),
		PrestartedSandboxes:    orDefaultKeepNegative(c.PrestartedSandboxes, DefaultPrestartedSandboxes),
		PrestartedSessions:     orDefaultKeepNegative(c.PrestartedSessions, DefaultPrestartedSessions),
	}
}

// LoadConfig reads and validates a configuration file.
func LoadConfig(path string) (Config, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("reading node agent config %s: %w", path, err)
	}
	var c Config
	if err := yaml.UnmarshalStrict(raw, &c); err != nil {
		return Config{}, fmt.Errorf("decoding node agent config %s: %w", path, err)
	}
	return c, nil
}

// Validate normalizes and checks the configuration: absolute, clean, existing admitted
// directories other than /, valid root names.
func (c *Config) Validate() error {
	if c.NodeName == "" {
		c.NodeName = os.Getenv("NODE_NAME")
	}
	if c.NodeName == "" {
		return fmt.Errorf("node agent config: nodeName is empty and NODE_NAME is unset")
	}
	if c.StateDir == "" || !filepath.IsAbs(c.StateDir) {
		return fmt.Errorf("node agent config: stateDir %q must be an absolute directory", c.StateDir)
	}
	for name, dir := range c.AdmittedRoots {
		if r := actuation.ValidateRootName(name); r != nil {
			return fmt.Errorf("node agent config: admitted root %q: %w", name, r)
		}
		if !filepath.IsAbs(dir) || filepath.Clean(dir) != dir || dir == "/" {
			return fmt.Errorf("node agent config: admitted root %q: %q must be an absolute, clean directory other than /", name, dir)
		}
		if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
			return fmt.Errorf("node agent config: admitted root %q: %q is not an existing directory", name, dir)
		}
	}
	if r := actuation.ValidateRootSharing(c.RootSharing); r != nil {
		return fmt.Errorf("node agent config: %w", r)
	}
	if q := c.QEMU; q != nil && q.Enabled {
		if q.ImageDir == "" || !filepath.IsAbs(q.ImageDir) || filepath.Clean(q.ImageDir) != q.ImageDir {
			return fmt.Errorf("node agent config: qemu.imageDir %q must be an absolute, clean directory", q.ImageDir)
		}
		switch q.Accel {
		case "", "auto", "kvm", "tcg":
		default:
			return fmt.Errorf("node agent config: qemu.accel %q is not auto, kvm or tcg", q.Accel)
		}
	}
	c.Caps = c.Caps.withDefaults()
	if c.HeartbeatSeconds <= 0 {
		c.HeartbeatSeconds = int(DefaultHeartbeat / time.Second)
	}
	return nil
}

// SourcesConfig is the node operator's workspace-source policy (the environments room's).
type SourcesConfig = environments.SourcesConfig
