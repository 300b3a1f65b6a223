// Package qemumicrovm implements the qemu-microvm.v1 EnvironmentBackend: one full-system
// Linux guest per environment, run by QEMU's microvm machine with a closed device set —
// vhost-user vsock served by one vhost-device-vsock process per VM, virtio-rng, and an
// output-only bounded diagnostic serial — and no NIC (-nodefaults, -nic none), no host
// filesystem share, no monitor. The guest agent (guest/cmd/workbench-guest) is reached
// over hybrid vsock through a Unix socket and bound to exactly one boot by a handshake
// (environment, source generation, VM plan digest, image digest, guest CID, and a fresh
// 32-byte nonce delivered through a read-only fw_cfg file).
//
// This package is the host broker of DESIGN §7: callers pass a backends.Spec (never host
// paths, VMM binaries, sockets or argv); the broker owns launch, sockets, boot nonces,
// exact process identities (pid + start time, signalled only through pidfds) and the
// recovery record. Layout under <StateDir>/vms (every level 0700):
//
//	<ID>/record.json    the recovery record (written before launch, completed after)
//	<ID>/binding.json   this boot's binding (0400), read by QEMU's fw_cfg
//	<ID>/v.sock         vhost-user socket (QEMU ↔ vhost-device-vsock)
//	<ID>/g.sock         hybrid-vsock host socket (CONNECT 1024 reaches the agent)
//	<ID>/g.sock_1025    the one-shot ready listener during boot
//	<ID>/s.sock         serial listener, removed once QEMU connected
//	<ID>/serial.log     bounded diagnostic serial (never logged)
//	.probe/             the KVM probe VM (Accel "auto"), removed after the probe
//
// The accelerator is KVM only where a probe VM actually booted to the handshake under
// accel=kvm; otherwise TCG, and the capability then says isolationClass emulated-vm
// (docs/vocabulary.md). No Kubernetes imports.
package qemumicrovm

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/guestclient"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/platform/loopdisk"
)

// ID is the backend identifier (spec.backend).
const ID = "qemu-microvm.v1"

// Accelerators.
const (
	AccelAuto = "auto"
	AccelKVM  = "kvm"
	AccelTCG  = "tcg"
)

// Defaults and bounds.
const (
	DefaultMaxVMs       = 4
	DefaultMaxMemoryMiB = 8192
	DefaultVCPUs        = 1
	DefaultMemoryMiB    = 512
	MinMemoryMiB        = 128
	DefaultBootTimeout  = 60 * time.Second // TCG boots in ~2.5 s on an idle 2-core host
	// DefaultSystemBootTimeout: a full-system variant under TCG (systemd first).
	DefaultSystemBootTimeout = 420 * time.Second
	DefaultShutdownTimeout   = 10 * time.Second
	DefaultProbeTimeout      = 30 * time.Second
	DefaultSerialMaxBytes    = 256 << 10
	MaxIDBytes               = 128
	MaxRoots                 = 32
	// killWait bounds the wait for a SIGKILLed process to be gone.
	killWait = 5 * time.Second
	// maxDirEntries bounds the directory listings of the recovery sweep.
	maxDirEntries = 10_000
	// maxSocketPath is the longest Unix socket path (sun_path is 108 bytes with a NUL).
	maxSocketPath = 107
	// guestCID is the guest's vsock CID. Each VM has its own vsock device, so CIDs never
	// collide across VMs.
	guestCID = 3
)

// Config is the node operator's configuration of the backend.
type Config struct {
	// StateDir is the agent's state directory; VMs live under <StateDir>/vms.
	StateDir string
	// ImageDir is where ImageManifest paths resolve (beneath it only).
	ImageDir string
	// QEMUBinary and VhostDeviceVsock are the VMM and the vsock device: absolute paths, or
	// names looked up in PATH (defaults qemu-system-x86_64, vhost-device-vsock; the
	// device also at <ImageDir>/guest/vhost-device-vsock where make guest-image puts it).
	QEMUBinary       string
	VhostDeviceVsock string
	// Accel is "auto" (default: KVM only if a probe VM boots under it, else TCG), "kvm"
	// or "tcg".
	Accel string
	// ProbeKernel and ProbeInitrd (relative to ImageDir; defaults guest/vmlinux and
	// guest/initramfs.cpio) boot the KVM probe. Without them "auto" means TCG.
	ProbeKernel, ProbeInitrd string
	// MaxVMs bounds the VMs of the node (vm-cap-reached above it).
	MaxVMs int
	// MaxVCPUs (default: host CPUs) and MaxMemoryMiB (default 8192) bound one VM.
	MaxVCPUs     int32
	MaxMemoryMiB int32
	// BootTimeout bounds launch → handshake (default 60 s); ShutdownTimeout the guest's
	// own poweroff at teardown before SIGKILL (default 10 s); ProbeTimeout the KVM probe.
	BootTimeout, ShutdownTimeout, ProbeTimeout time.Duration
	// SystemBootTimeout bounds launch → handshake of a full-system variant (systemd boots
	// before the agent; default 420 s: 60-70 s under TCG on a busy 2-core host, 4 min
	// measured with eight builds sharing its two cores).
	SystemBootTimeout time.Duration
	// SerialMaxBytes caps serial.log (default 256 KiB).
	SerialMaxBytes int64
	// NoRNG leaves out virtio-rng; NoSandbox leaves out QEMU's seccomp sandbox (for a
	// QEMU built without it).
	NoRNG, NoSandbox bool
	// Cgroups, when set, puts QEMU and the vsock device of each VM in a cgroup
	// (vm-<environment>) with memory (guest memory + VMMOverheadMiB) and pids
	// (VMMPids) limits and a CPU quota of vCPUs+1; a missing controller refuses the
	// boot with cgroup-unavailable.
	Cgroups *cgroups.Manager
	// VMMUID is the host uid and gid QEMU and vhost-device-vsock run as (0 selects
	// DefaultVMMUID); see vmm.go for the whole confinement profile.
	VMMUID uint32
	// Disks is the working-disk pool of full-system variants: per environment a reflink
	// or sparse clone of the variant's pinned raw base, under the node's storage
	// reservation (shared with fixture-copy.v1's disks). Without it a variant with a disk
	// is refused and the capability claims no full-system fidelity.
	Disks *loopdisk.Pool
	// SystemDisk (relative to ImageDir; default guest-system/rootfs.raw) is the
	// full-system base this node offers: only when it exists (and Disks is set) does the
	// capability claim full-system-linux; the minimal initramfs variant is process-runtime.
	SystemDisk string
}

// Backend is the qemu-microvm.v1 backend. It is safe for concurrent use; operations on
// one environment ID are serialised.
type Backend struct {
	cfg     Config
	vmsDir  string
	qemuBin string // resolved, absolute, symlinks evaluated
	devBin  string
	digests digestCache

	mu      sync.Mutex
	locks   backends.IDLocks
	vms     map[string]*vm
	booting int

	accelMu     sync.Mutex
	accel       string // resolved accelerator ("" until resolved)
	accelReason string

	infoOnce    sync.Once
	qemuVersion string
	qemuDigest  string
}

var _ backends.Backend = (*Backend)(nil)

// New checks the configuration and returns the backend. It launches nothing; the KVM
// probe (Accel "auto") runs at the first Capability or boot.
func New(cfg Config) (*Backend, error) {
	bad := func(format string, args ...any) (*Backend, error) {
		return nil, fmt.Errorf("%s config: "+format, append([]any{ID}, args...)...)
	}
	if cfg.StateDir == "" || !filepath.IsAbs(cfg.StateDir) {
		return bad("stateDir %q must be absolute", cfg.StateDir)
	}
	if cfg.ImageDir == "" || !filepath.IsAbs(cfg.ImageDir) {
		return bad("imageDir %q must be absolute", cfg.ImageDir)
	}
	cfg.StateDir, cfg.ImageDir = filepath.Clean(cfg.StateDir), filepath.Clean(cfg.ImageDir)
	// QEMU splits option values at commas: a path with one would be misparsed.
	if strings.ContainsAny(cfg.StateDir, ",=") {
		return bad("stateDir %q must not contain ',' or '='", cfg.StateDir)
	}
	switch cfg.Accel {
	case "":
		cfg.Accel = AccelAuto
	case AccelAuto, AccelKVM, AccelTCG:
	default:
		return bad("accel %q is not auto, kvm or tcg", cfg.Accel)
	}
	if cfg.QEMUBinary == "" {
		cfg.QEMUBinary = "qemu-system-x86_64"
	}
	if cfg.VhostDeviceVsock == "" {
		cfg.VhostDeviceVsock = "vhost-device-vsock"
		if _, err := exec.LookPath(cfg.VhostDeviceVsock); err != nil {
			cfg.VhostDeviceVsock = filepath.Join(cfg.ImageDir, "guest", "vhost-device-vsock")
		}
	}
	qemu, err := resolveBinary(cfg.QEMUBinary)
	if err != nil {
		return bad("qemuBinary: %w", err)
	}
	dev, err := resolveBinary(cfg.VhostDeviceVsock)
	if err != nil {
		return bad("vhostDeviceVsock: %w", err)
	}
	if cfg.ProbeKernel == "" && cfg.ProbeInitrd == "" {
		cfg.ProbeKernel, cfg.ProbeInitrd = "guest/vmlinux", "guest/initramfs.cpio"
	}
	if cfg.MaxVMs <= 0 {
		cfg.MaxVMs = DefaultMaxVMs
	}
	if cfg.MaxVCPUs <= 0 {
		cfg.MaxVCPUs = int32(runtime.NumCPU())
	}
	if cfg.MaxMemoryMiB <= 0 {
		cfg.MaxMemoryMiB = DefaultMaxMemoryMiB
	}
	if cfg.SystemBootTimeout <= 0 {
		cfg.SystemBootTimeout = DefaultSystemBootTimeout
	}
	if cfg.BootTimeout <= 0 {
		cfg.BootTimeout = DefaultBootTimeout
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = DefaultShutdownTimeout
	}
	if cfg.ProbeTimeout <= 0 {
		cfg.ProbeTimeout = DefaultProbeTimeout
	}
	if cfg.SerialMaxBytes <= 0 {
		cfg.SerialMaxBytes = DefaultSerialMaxBytes
	}
	b := &Backend{cfg: cfg, vmsDir: filepath.Join(cfg.StateDir, "vms"), qemuBin: qemu, devBin: dev,
		vms: map[string]*vm{}}
	if cfg.Accel != AccelAuto {
		b.accel, b.accelReason = cfg.Accel, "configured"
	}
	return b, nil
}

func resolveBinary(name string) (string, error) {
	p, err := exec.LookPath(name)
	if err != nil {
		return "", err
	}
	if p, err = filepath.Abs(p); err != nil {
		return "", err
	}
	if p, err = filepath.EvalSymlinks(p); err != nil {
		return "", err
	}
	return p, nil
}

// ID returns "qemu-microvm.v1".
func (b *Backend) ID() string { return ID }

// VMsDir is <StateDir>/vms.
func (b *Backend) VMsDir() string { return b.vmsDir }

// Binaries returns the resolved QEMU and vsock device paths.
func (b *Backend) Binaries() (qemu, device string) { return b.qemuBin, b.devBin }

// Slots returns the VMs running or booting and the node's maximum (MaxVMs).
func (b *Backend) Slots() (used, limit int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.vms) + b.booting, b.cfg.MaxVMs
}

func (b *Backend) lock(id string) func() { return b.locks.Lock(id) }

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

func (b *Backend) checkID(id string) error {
	if len(id) == 0 || len(id) > MaxIDBytes || !idPattern.MatchString(id) {
		return actuation.Refusef(actuation.CodeEnvironmentIDInvalid, "environment ID %q must be 1..%d bytes of [A-Za-z0-9._-], not starting with '.', '_' or '-'", id, MaxIDBytes)
	}
	if p := guestclient.ReadyPath(filepath.Join(b.vmsDir, id, guestSock), protocol.ReadyPort); len(p) > maxSocketPath {
		return actuation.Refusef(actuation.CodeStateDirTooLong, "socket path %q is %d bytes, at most %d: use a shorter stateDir", p, len(p), maxSocketPath)
	}
	return nil
}

// plan is the normalized VM plan of one environment; its digest is what the handshake
// binds as the plan.
type plan struct {
	Backend        string   `json:"backend"`
	ID             string   `json:"id"`
	Ref            string   `json:"ref"`
	SpecPlanDigest string   `json:"specPlanDigest,omitempty"`
	Accel          string   `json:"accel"`
	VCPUs          int32    `json:"vcpus"`
	MemoryMiB      int32    `json:"memoryMiB"`
	Variant        string   `json:"variant,omitempty"`
	KernelDigest   string   `json:"kernelDigest"`
	InitrdDigest   string   `json:"initrdDigest"`
	DiskDigest     string   `json:"diskDigest,omitempty"`
	DiskBytes      int64    `json:"diskBytes,omitempty"`
	PIDs           int32    `json:"pids,omitempty"` // the guest's per-command pids limit (full-system)
	CommandLine    string   `json:"commandLine"`
	Devices        []string `json:"devices"`
	Network        string   `json:"network"`
	HostSharing    string   `json:"hostSharing"`
	Roots          []string `json:"roots"`

	roots []backends.MountedRoot
	img   *backends.BootImage
}

func (p *plan) digest() string {
	data, _ := json.Marshal(p)
	h := sha256.Sum256(data)
	return protocol.DigestPrefix + hex.EncodeToString(h[:])
}

// devices is the closed device set this backend attaches.
func (b *Backend) devices() []string {
	d := []string{"virtio-vsock", "diagnostic-serial"}
	if !b.cfg.NoRNG {
		d = append(d, "virtio-rng")
	}
	sort.Strings(d)
	return d
}

// checkSpec validates the spec (without touching the image) and builds its plan (the
// accelerator is filled in by the caller).
func (b *Backend) checkSpec(spec backends.Spec) (*plan, error) {
	if err := b.checkID(spec.ID); err != nil {
		return nil, fmt.Errorf("environment %s: %w", spec.Ref, err)
	}
	if err := checkBootImage(spec.Boot); err != nil {
		return nil, fmt.Errorf("environment %s: %w", spec.Ref, err)
	}
	p := &plan{Backend: ID, ID: spec.ID, Ref: spec.Ref, SpecPlanDigest: spec.PlanDigest, VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB,
		Variant: spec.Boot.Variant, KernelDigest: spec.Boot.KernelDigest, InitrdDigest: spec.Boot.InitrdDigest, CommandLine: spec.Boot.CommandLine,
		DiskDigest: spec.Boot.DiskDigest, Devices: b.devices(), Network: "none", HostSharing: "denied", img: spec.Boot}
	if p.DiskDigest != "" {
		p.DiskBytes = int64(spec.DiskMiB) << 20 // at least the base's size (Clone)
		p.PIDs = spec.PIDs
		p.Devices = append(slices.Clone(p.Devices), "virtio-block")
		sort.Strings(p.Devices)
	}
	if p.VCPUs == 0 {
		p.VCPUs = DefaultVCPUs
	}
	if p.MemoryMiB == 0 {
		p.MemoryMiB = DefaultMemoryMiB
	}
	switch {
	case p.VCPUs < 1 || p.MemoryMiB < MinMemoryMiB:
		return nil, actuation.Refusef(actuation.CodeResourcesInvalid, "environment %s: %d vCPUs and %d MiB; at least 1 vCPU and %d MiB", spec.Ref, p.VCPUs, p.MemoryMiB, MinMemoryMiB)
	case p.VCPUs > b.cfg.MaxVCPUs || p.MemoryMiB > b.cfg.MaxMemoryMiB:
		return nil, actuation.Refusef(actuation.CodeResourcesAboveMax, "environment %s: %d vCPUs and %d MiB; this node allows at most %d vCPUs and %d MiB per VM",
			spec.Ref, p.VCPUs, p.MemoryMiB, b.cfg.MaxVCPUs, b.cfg.MaxMemoryMiB)
	}
	if len(spec.Roots) == 0 || len(spec.Roots) > MaxRoots {
		return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: %d roots, want 1..%d", spec.Ref, len(spec.Roots), MaxRoots)
	}
	seen := map[string]bool{}
	for i, r := range spec.Roots {
		if ref := actuation.ValidateRootName(r.Name); ref != nil {
			return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: roots[%d].name: %s", spec.Ref, i, ref.Message)
		}
		if seen[r.Name] {
			return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: roots[%d].name %q is duplicated", spec.Ref, i, r.Name)
		}
		seen[r.Name] = true
		if r.HostPath != "" || r.Source != "" {
			return nil, actuation.Refusef(actuation.CodeRootInvalid, "environment %s: roots[%d]: %s shares no host directory; a root is a directory inside the guest (no hostPath or source)", spec.Ref, i, ID)
		}
		p.Roots = append(p.Roots, r.Name)
		p.roots = append(p.roots, backends.MountedRoot{Name: r.Name, GuestDir: r.Name, ReadOnly: r.ReadOnly})
	}
	return p, nil
}

func failed(err error) (backends.Status, error) {
	return backends.Status{Phase: backends.PhaseFailed, Message: err.Error()}, err
}

// Allocate boots the environment's VM unless it already runs (idempotent: a second call
// for a running VM returns its status and boots nothing). A VM recorded by a previous
// process is adopted only on an exact match; otherwise it is stopped and replaced by a
// new boot, which advances the generation.
func (b *Backend) Allocate(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := ctx.Err(); err != nil {
		return backends.Status{}, fmt.Errorf("allocate %s: %w", spec.Ref, err)
	}
	p, err := b.checkSpec(spec)
	if err != nil {
		return failed(err)
	}
	defer b.lock(spec.ID)()
	return b.ensure(ctx, spec, p)
}

// Start boots the VM if it is not running; otherwise it is Allocate's idempotent answer.
func (b *Backend) Start(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	return b.Allocate(ctx, spec)
}

func (b *Backend) ensure(ctx context.Context, spec backends.Spec, p *plan) (backends.Status, error) {
	v := b.get(spec.ID)
	if v == nil {
		if rec, err := readRecord(b.dir(spec.ID)); err == nil && rec.State != StateStopped {
			// Left by a previous process and not recovered: adopt only an exact match.
			if v, err = b.adopt(ctx, rec); err != nil {
				b.stopRecord(rec, "not adopted at allocate: "+err.Error())
			}
		}
	}
	if v != nil {
		if v.alive() {
			return b.status(v, p), nil
		}
		b.stopVM(v, "the VM exited")
	}
	v, err := b.boot(ctx, spec, p)
	if err != nil {
		return failed(fmt.Errorf("allocate %s: %w", spec.Ref, err))
	}
	return b.status(v, p), nil
}

func (b *Backend) status(v *vm, p *plan) backends.Status {
	st := backends.Status{Phase: backends.PhaseReady, Generation: v.rec.Generation, Roots: p.roots,
		Message: fmt.Sprintf("guest generation %d booted under %s", v.rec.Generation, v.rec.Accel)}
	if v.rec.State == StateDraining {
		st.Phase = backends.PhaseDraining
	}
	q := *p
	q.Accel = v.rec.Accel
	if q.digest() != v.rec.Binding.PlanDigest {
		st.Message += "; the plan changed since this boot and applies at the next boot"
	}
	return st
}

func (b *Backend) dir(id string) string { return filepath.Join(b.vmsDir, id) }

func (b *Backend) get(id string) *vm {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.vms[id]
}

// Inspect observes the VM now: both recorded processes alive as the recorded
// incarnations, the guest socket the pinned one, and a handshake plus an inspect over
// the channel. It never boots or adopts.
func (b *Backend) Inspect(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := ctx.Err(); err != nil {
		return backends.Status{}, fmt.Errorf("inspect %s: %w", spec.Ref, err)
	}
	if err := b.checkID(spec.ID); err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Message: err.Error()}, nil
	}
	v := b.get(spec.ID)
	if v == nil {
		rec, err := readRecord(b.dir(spec.ID))
		switch {
		case errors.Is(err, errNoRecord):
			return backends.Status{Phase: backends.PhaseFailed, Message: string(actuation.CodeVMNotRunning) + ": no VM is allocated"}, nil
		case err != nil:
			return backends.Status{Phase: backends.PhaseFailed, Message: string(actuation.CodeVMNotRunning) + ": " + err.Error()}, nil
		}
		return backends.Status{Phase: backends.PhaseFailed, Generation: rec.Generation,
			Message: fmt.Sprintf("%s: recorded VM (state %s) is not run by this process", string(actuation.CodeVMNotRunning), rec.State)}, nil
	}
	gen := v.rec.Generation
	if !v.alive() {
		return backends.Status{Phase: backends.PhaseFailed, Generation: gen, Message: string(actuation.CodeVMNotRunning) + ": the VM's QEMU or vsock device exited"}, nil
	}
	ictx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := guestclient.Connect(ictx, v.endpoint(), v.rec.Binding)
	if err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Generation: gen, Message: "guest unreachable: " + err.Error()}, nil
	}
	defer func() { _ = c.Close() }()
	info, err := c.Inspect(ictx, "")
	if err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Generation: gen, Message: "guest inspect: " + err.Error()}, nil
	}
	roots := make([]backends.MountedRoot, 0, len(spec.Roots))
	for _, r := range spec.Roots {
		roots = append(roots, backends.MountedRoot{Name: r.Name, GuestDir: r.Name, ReadOnly: r.ReadOnly})
	}
	st := backends.Status{Phase: backends.PhaseReady, Generation: gen, Roots: roots,
		Message: fmt.Sprintf("guest generation %d under %s: kernel %s, up %d ms, %d sessions, %d processes (guest-reported)",
			gen, v.rec.Accel, protocol.Truncate(info.Kernel), info.UptimeMS, info.Sessions, info.Processes)}
	if v.rec.State == StateDraining || info.Quiesced {
		st.Phase = backends.PhaseDraining
	}
	return st, nil
}

// Drain quiesces the guest (it starts no new process or session; running ones may
// finish) and records the state. Monotonic: a drained VM is not un-drained.
func (b *Backend) Drain(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := ctx.Err(); err != nil {
		return backends.Status{}, fmt.Errorf("drain %s: %w", spec.Ref, err)
	}
	if err := b.checkID(spec.ID); err != nil {
		return backends.Status{}, err
	}
	defer b.lock(spec.ID)()
	v := b.get(spec.ID)
	if v == nil {
		return backends.Status{Phase: backends.PhaseFailed, Message: string(actuation.CodeVMNotRunning) + ": no VM runs for this environment"},
			actuation.Refusef(actuation.CodeVMNotRunning, "drain %s: no VM runs for this environment", spec.Ref)
	}
	if v.rec.State != StateDraining {
		v.rec.State = StateDraining
		if err := writeRecord(v.dir, v.rec); err != nil {
			return backends.Status{}, fmt.Errorf("drain %s: %w", spec.Ref, err)
		}
	}
	if v.stoppedNow() {
		return backends.Status{Phase: backends.PhaseDraining, Generation: v.rec.Generation,
			Message: "recorded as draining; the VM is paused, so nothing starts in it"}, nil
	}
	qctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	c, err := guestclient.Connect(qctx, v.endpoint(), v.rec.Binding)
	if err != nil {
		return backends.Status{Phase: backends.PhaseDraining, Generation: v.rec.Generation, Message: "recorded as draining; guest unreachable: " + err.Error()},
			fmt.Errorf("drain %s: %w", spec.Ref, err)
	}
	defer func() { _ = c.Close() }()
	if _, err := c.Quiesce(qctx, ""); err != nil {
		return backends.Status{Phase: backends.PhaseDraining, Generation: v.rec.Generation, Message: "recorded as draining; guest quiesce: " + err.Error()},
			fmt.Errorf("drain %s: quiesce: %w", spec.Ref, err)
	}
	return backends.Status{Phase: backends.PhaseDraining, Generation: v.rec.Generation, Message: "guest quiesced: no new processes or sessions"}, nil
}

// Teardown asks the guest to power off (bounded), then SIGKILLs the exact recorded QEMU
// and vsock device processes that remain (through pidfds; never a recycled pid), kills any
// unrecorded VMM or device process of the VM's directory, and removes the sockets,
// binding, serial log, record and directory. Entries it does not recognise stay and are
// reported as Residue, as are processes that survived. Idempotent.
func (b *Backend) Teardown(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := ctx.Err(); err != nil {
		return backends.Status{}, fmt.Errorf("teardown %s: %w", spec.Ref, err)
	}
	if err := b.checkID(spec.ID); err != nil {
		return backends.Status{}, err
	}
	defer b.lock(spec.ID)()
	v := b.get(spec.ID)
	var residue []string
	var err error
	if v != nil {
		residue, err = b.destroyVM(ctx, v, true)
	} else {
		residue, err = b.destroyDir(b.dir(spec.ID), true)
	}
	if err == nil {
		residue = append(residue, b.deleteDisk(spec.ID, spec.KeepDisk)...)
	}
	if err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Message: err.Error(), Residue: residue}, fmt.Errorf("teardown %s: %w", spec.Ref, err)
	}
	st := backends.Status{Phase: backends.PhaseClosed, Residue: residue}
	if len(residue) > 0 {
		st.Message = fmt.Sprintf("%d resources left in place", len(residue))
	}
	return st, nil
}

// Guest returns a new handshaken channel to the environment's guest agent (one per
// concurrent stream; the caller closes it). The binding and the pinned socket identity
// come from the recovery record; nothing of the caller's reaches the endpoint.
func (b *Backend) Guest(ctx context.Context, id string) (*guestclient.Client, error) {
	v := b.get(id)
	if v == nil {
		return nil, actuation.Refusef(actuation.CodeVMNotRunning, "no VM runs for environment %s on this node", id)
	}
	if err := b.held(v); err != nil {
		return nil, err
	}
	c, err := guestclient.Connect(ctx, v.endpoint(), v.rec.Binding)
	if err != nil {
		return nil, fmt.Errorf("guest of environment %s: %w", id, err)
	}
	return c, nil
}

// GuestChannel returns the pinned guest endpoint and this boot's binding, for a helper
// process of the node agent that opens its own channels (the guest PTY relay). The
// binding carries the boot nonce: hand it only to processes of the agent itself.
func (b *Backend) GuestChannel(id string) (guestclient.Endpoint, protocol.Binding, error) {
	v := b.get(id)
	if v == nil {
		return guestclient.Endpoint{}, protocol.Binding{}, actuation.Refusef(actuation.CodeVMNotRunning, "no VM runs for environment %s on this node", id)
	}
	return v.endpoint(), v.rec.Binding, nil
}

// VMInfo is what the broker reveals about a running VM (for tests and benchmarks).
type VMInfo struct {
	Generation   int64
	Accel        string
	QEMU, Device ProcIdentity
	Dir          string
	SerialBytes  int64
}

// Info describes the VM of id, if this process runs one.
func (b *Backend) Info(id string) (VMInfo, bool) {
	v := b.get(id)
	if v == nil {
		return VMInfo{}, false
	}
	in := VMInfo{Generation: v.rec.Generation, Accel: v.rec.Accel, Dir: v.dir}
	if v.rec.QEMU != nil {
		in.QEMU = *v.rec.QEMU
	}
	if v.rec.Device != nil {
		in.Device = *v.rec.Device
	}
	in.SerialBytes, _ = v.serial.stats()
	return in, true
}

func newNonce() (string, error) {
	var b [protocol.NonceHexLen / 2]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("boot nonce: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}
