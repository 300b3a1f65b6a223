//go:build darwin

package vfkitsystem

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"

	"github.com/Code-Hex/vz/v3"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
)

// Config is the node operator's configuration of the backend.
type Config struct {
	// StateDir is the agent's state directory; VMs live under <StateDir>/vfkit.
	StateDir string
	// ImageDir is where ImageManifest paths resolve (beneath it only). It must be on
	// APFS, like StateDir's volume: the working disk is a clone, never a copy.
	ImageDir string
	// MaxVMs bounds the VMs of the node (vm-cap-reached above it).
	MaxVMs int
	// Limits bound one VM (defaults: host CPUs, DefaultMaxMemoryMiB, MaxDiskMiB).
	Limits Limits
	// BootTimeout bounds boot → readiness (default 60 s); ShutdownTimeout the guest's own
	// shutdown at teardown before a forced stop (default 10 s).
	BootTimeout, ShutdownTimeout time.Duration
	// SerialMaxBytes caps serial.log (default 256 KiB).
	SerialMaxBytes int64
	// Devices is what the configuration adds to the closed profile: it must be empty (a
	// configuration naming a device is refused at every boot, never silently ignored).
	Devices []string
}

// Backend is the vfkit-system.v1 backend. It is safe for concurrent use; operations on
// one environment ID are serialised.
type Backend struct {
	cfg  Config
	root string
	self ProcessIdentity

	locks backends.IDLocks
	mu    sync.Mutex
	vms   map[string]*vm
}

type vm struct {
	dir     string
	rec     *Record
	machine *vz.VirtualMachine
	ln      net.Listener // g.sock
	serial  *SerialLog
	serialR *os.File
	// files are the host ends handed to the framework (the serial's /dev/null and pipe
	// writer), closed when the VM stops.
	files  []*os.File
	served chan struct{}
}

// New validates cfg and prepares <StateDir>/vfkit.
func New(cfg Config) (*Backend, error) {
	if !filepath.IsAbs(cfg.StateDir) || !filepath.IsAbs(cfg.ImageDir) {
		return nil, fmt.Errorf("%s: stateDir and imageDir must be absolute", ID)
	}
	if cfg.MaxVMs <= 0 {
		cfg.MaxVMs = DefaultMaxVMs
	}
	if cfg.Limits.MaxVCPUs <= 0 {
		cfg.Limits.MaxVCPUs = int32(runtime.NumCPU())
	}
	if cfg.Limits.MaxMemoryMiB <= 0 {
		cfg.Limits.MaxMemoryMiB = DefaultMaxMemoryMiB
	}
	if cfg.Limits.MaxDiskMiB <= 0 {
		cfg.Limits.MaxDiskMiB = MaxDiskMiB
	}
	if cfg.BootTimeout <= 0 {
		cfg.BootTimeout = DefaultBootTimeout
	}
	if cfg.ShutdownTimeout <= 0 {
		cfg.ShutdownTimeout = 10 * time.Second
	}
	if cfg.SerialMaxBytes <= 0 {
		cfg.SerialMaxBytes = DefaultSerialMaxBytes
	}
	if err := CheckDeviceProfile(append(append([]string(nil), Profile...), cfg.Devices...)); err != nil {
		return nil, fmt.Errorf("%s configuration: %w", ID, err)
	}
	root := filepath.Join(cfg.StateDir, "vfkit")
	if err := os.MkdirAll(root, 0o700); err != nil {
		return nil, fmt.Errorf("%s: %w", ID, err)
	}
	self, err := ProcessIdentityOf(os.Getpid())
	if err != nil {
		return nil, fmt.Errorf("%s: own process identity: %w", ID, err)
	}
	return &Backend{cfg: cfg, root: root, self: self, vms: map[string]*vm{}}, nil
}

// ID implements backends.Backend.
func (b *Backend) ID() string { return ID }

// Capability is this node's descriptor (version: the agent's; macOSVersion from the caller).
func (b *Backend) Capability(version, macOSVersion string) actuation.Capability {
	digest := ""
	if exe, err := os.Executable(); err == nil {
		if d, err := fileDigest(exe); err == nil {
			digest = d
		}
	}
	return Capability(version, digest, macOSVersion)
}

func (b *Backend) dir(id string) string { return filepath.Join(b.root, id) }

func (b *Backend) get(id string) *vm {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.vms[id]
}

func failed(err error) (backends.Status, error) {
	return backends.Status{Phase: backends.PhaseFailed, Message: err.Error()}, err
}

// Allocate boots the environment's VM unless it already runs in this process (a VM of a
// previous process ended with it: Recover tombstoned it, and this boots the next
// generation on the kept working disk).
func (b *Backend) Allocate(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	if err := ctx.Err(); err != nil {
		return backends.Status{}, fmt.Errorf("allocate %s: %w", spec.Ref, err)
	}
	p, err := BuildPlan(spec, b.cfg.Limits, b.cfg.Devices)
	if err != nil {
		return failed(err)
	}
	if err := CheckSocketPath(filepath.Join(b.dir(spec.ID), GuestSockName)); err != nil {
		return failed(err)
	}
	defer b.locks.Lock(spec.ID)()
	if v := b.get(spec.ID); v != nil {
		if v.machine.State() == vz.VirtualMachineStateRunning {
			return b.status(v, p), nil
		}
		b.stop(v, "the VM is no longer running")
	}
	v, err := b.boot(ctx, spec, p)
	if err != nil {
		return failed(fmt.Errorf("allocate %s: %w", spec.Ref, err))
	}
	return b.status(v, p), nil
}

// Start is Allocate's idempotent answer.
func (b *Backend) Start(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	return b.Allocate(ctx, spec)
}

func (b *Backend) status(v *vm, p *Plan) backends.Status {
	st := backends.Status{Phase: backends.PhaseReady, Generation: v.rec.Generation, Roots: p.MountedRoots(),
		Message: fmt.Sprintf("guest generation %d booted through EFI under the Virtualization framework", v.rec.Generation)}
	if v.rec.State == StateDraining {
		st.Phase = backends.PhaseDraining
	}
	if p.Digest() != v.rec.Binding.PlanDigest {
		st.Message += "; the plan changed since this boot and applies at the next boot"
	}
	return st
}

func (b *Backend) boot(ctx context.Context, spec backends.Spec, p *Plan) (*vm, error) {
	b.mu.Lock()
	n := len(b.vms)
	b.mu.Unlock()
	if n >= b.cfg.MaxVMs {
		return nil, actuation.Refuse(actuation.CodeVMCapReached, "", "this node runs %d VMs, at most %d", n, b.cfg.MaxVMs)
	}
	dir := b.dir(spec.ID)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	gen := int64(1)
	prev, perr := ReadRecord(dir, b.cfg.Limits)
	if perr == nil {
		gen = prev.Generation + 1
	} else if !errors.Is(perr, ErrNoRecord) {
		// An unreadable record proves nothing about the files beside it.
		_ = os.RemoveAll(dir)
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		prev = nil
	}
	base, err := b.resolveImage(p.Disk.BasePath)
	if err != nil {
		return nil, err
	}
	if d, err := fileDigest(base); err != nil {
		return nil, actuation.Refuse(actuation.CodeImageInvalid, "", "base disk %s: %v", p.Disk.BasePath, err)
	} else if d != p.Disk.BaseDigest {
		return nil, actuation.Refuse(actuation.CodeDigestMismatch, "", "base disk %s is %s, the manifest says %s", p.Disk.BasePath, d, p.Disk.BaseDigest)
	}
	nonce, err := newNonce()
	if err != nil {
		return nil, err
	}
	rec := &Record{ID: spec.ID, Ref: spec.Ref, State: StateLaunching, Generation: gen, Plan: *p, Owner: &b.self,
		Binding: protocol.Binding{EnvironmentRef: spec.Ref, SourceGeneration: gen, PlanDigest: p.Digest(),
			ImageDigest: p.Disk.BaseDigest, GuestCID: 3, BootNonce: nonce},
		LaunchedAt: time.Now().UTC()}
	if prev != nil && prev.CloneOf == p.Disk.BaseDigest {
		rec.Disk, rec.CloneOf, rec.EFIVars = prev.Disk, prev.CloneOf, prev.EFIVars
	}
	if err := WriteRecord(dir, rec); err != nil {
		return nil, err
	}
	v := &vm{dir: dir, rec: rec, served: make(chan struct{})}
	ok := false
	defer func() {
		if !ok {
			b.stop(v, "boot failed")
		}
	}()
	if err := b.prepareDisks(dir, base, rec); err != nil {
		return nil, err
	}
	cfg, err := b.configure(dir, rec, v)
	if err != nil {
		return nil, err
	}
	m, err := vz.NewVirtualMachine(cfg)
	if err != nil {
		return nil, actuation.Refuse(actuation.CodeBootFailed, "", "create the virtual machine: %v", err)
	}
	v.machine = m
	socks := m.SocketDevices()
	if len(socks) != 1 {
		return nil, actuation.Refuse(actuation.CodeBootFailed, "", "%d vsock devices, want 1", len(socks))
	}
	ready, err := socks[0].Listen(protocol.ReadyPort)
	if err != nil {
		return nil, actuation.Refuse(actuation.CodeBootFailed, "", "readiness listener: %v", err)
	}
	defer func() { _ = ready.Close() }()
	if err := m.Start(); err != nil {
		return nil, actuation.Refuse(actuation.CodeBootFailed, "", "start: %v", err)
	}
	if err := WaitReady(ready, min(b.cfg.BootTimeout, time.Until(deadline(ctx, b.cfg.BootTimeout)))); err != nil {
		return nil, err
	}
	sockPath := filepath.Join(dir, GuestSockName)
	_ = os.Remove(sockPath)
	ln, err := net.Listen("unix", sockPath)
	if err != nil {
		return nil, actuation.Refuse(actuation.CodeBootFailed, "", "guest socket: %v", err)
	}
	// Served from here on, so every later failure (and stop) closes it through v.ln.
	dev := socks[0]
	v.ln = ln
	go func() {
		defer close(v.served)
		_ = ServeHybrid(ln, func(port uint32) (net.Conn, error) { return dev.Connect(port) })
	}()
	if err := os.Chmod(sockPath, 0o600); err != nil {
		return nil, err
	}
	sid, err := StatFile(sockPath)
	if err != nil {
		return nil, err
	}
	rec.Socket = &sid
	rec.State, rec.ReadyAt = StateRunning, time.Now().UTC()
	if err := WriteRecord(dir, rec); err != nil {
		return nil, err
	}
	b.mu.Lock()
	b.vms[spec.ID] = v
	b.mu.Unlock()
	ok = true
	return v, nil
}

func deadline(ctx context.Context, d time.Duration) time.Time {
	if t, ok := ctx.Deadline(); ok {
		return t
	}
	return time.Now().Add(d)
}

// resolveImage resolves rel beneath the image directory (symlinks evaluated, the result
// still beneath it, a regular file).
func (b *Backend) resolveImage(rel string) (string, error) {
	if err := checkRelPath(rel); err != nil {
		return "", err
	}
	root, err := filepath.EvalSymlinks(b.cfg.ImageDir)
	if err != nil {
		return "", actuation.Refuse(actuation.CodeImageInvalid, "", "image directory: %v", err)
	}
	p, err := filepath.EvalSymlinks(filepath.Join(root, rel))
	if err != nil {
		return "", actuation.Refuse(actuation.CodeImageInvalid, "", "image %s: %v", rel, err)
	}
	if !strings.HasPrefix(p, root+string(os.PathSeparator)) {
		return "", actuation.Refuse(actuation.CodeImageInvalid, "", "image %s resolves outside the image directory", rel)
	}
	fi, err := os.Stat(p)
	if err != nil || !fi.Mode().IsRegular() {
		return "", actuation.Refuse(actuation.CodeImageInvalid, "", "image %s is not a regular file", rel)
	}
	return p, nil
}

// prepareDisks keeps the environment's working disk and EFI store when their recorded
// identities still match, else makes them anew: the disk as an APFS clone of the base
// grown to the plan's virtual size, the store empty. Then it writes this boot's binding
// disk. Every identity goes into the record before the VM exists.
func (b *Backend) prepareDisks(dir, base string, rec *Record) error {
	diskPath := filepath.Join(dir, DiskName)
	now, serr := StatFile(diskPath)
	if CompareFile(rec.Disk, now, serr) != FileMatches {
		_ = os.Remove(diskPath)
		if err := cloneFile(base, diskPath); err != nil {
			return actuation.Refuse(actuation.CodeStorageExhausted, "", "working disk: %v", err)
		}
		fi, err := os.Stat(diskPath)
		if err != nil {
			return err
		}
		want := int64(rec.Plan.Disk.VirtualMiB) << 20
		if fi.Size() > want {
			return actuation.Refuse(actuation.CodeResourcesInvalid, "", "the base disk is %d bytes, above the plan's %d MiB", fi.Size(), rec.Plan.Disk.VirtualMiB)
		}
		if err := os.Truncate(diskPath, want); err != nil { // sparse growth: no blocks allocated
			return err
		}
		if err := os.Chmod(diskPath, 0o600); err != nil {
			return err
		}
		id, err := StatFile(diskPath)
		if err != nil {
			return err
		}
		rec.Disk, rec.CloneOf = &id, rec.Plan.Disk.BaseDigest
		if err := WriteRecord(dir, rec); err != nil {
			return err
		}
	}
	efiPath := filepath.Join(dir, EFIVarsName)
	now, serr = StatFile(efiPath)
	if CompareFile(rec.EFIVars, now, serr) != FileMatches {
		_ = os.Remove(efiPath)
		if _, err := vz.NewEFIVariableStore(efiPath, vz.WithCreatingEFIVariableStore()); err != nil {
			return actuation.Refuse(actuation.CodeBootFailed, "", "EFI variable store: %v", err)
		}
		id, err := StatFile(efiPath)
		if err != nil {
			return err
		}
		rec.EFIVars = &id
	}
	data, err := BindingDisk(rec.Binding)
	if err != nil {
		return err
	}
	bindPath := filepath.Join(dir, BindingDiskName)
	_ = os.Remove(bindPath)
	if err := writeFileAtomic(dir, BindingDiskName, data, 0o400); err != nil {
		return err
	}
	id, err := StatFile(bindPath)
	if err != nil {
		return err
	}
	rec.BindingDisk = &id
	return WriteRecord(dir, rec)
}

// configure builds the VZ configuration from the plan's device list only: each device of
// the closed profile maps to exactly one configuration call; anything else is refused
// before the framework sees it.
func (b *Backend) configure(dir string, rec *Record, v *vm) (*vz.VirtualMachineConfiguration, error) {
	p := &rec.Plan
	if err := CheckDeviceProfile(p.Devices); err != nil {
		return nil, err
	}
	store, err := vz.NewEFIVariableStore(filepath.Join(dir, EFIVarsName))
	if err != nil {
		return nil, actuation.Refuse(actuation.CodeBootFailed, "", "EFI variable store: %v", err)
	}
	loader, err := vz.NewEFIBootLoader(vz.WithEFIVariableStore(store))
	if err != nil {
		return nil, actuation.Refuse(actuation.CodeBootFailed, "", "EFI boot loader: %v", err)
	}
	cfg, err := vz.NewVirtualMachineConfiguration(loader, uint(p.VCPUs), uint64(p.MemoryMiB)<<20)
	if err != nil {
		return nil, actuation.Refuse(actuation.CodeBootFailed, "", "configuration: %v", err)
	}
	platform, err := vz.NewGenericPlatformConfiguration()
	if err != nil {
		return nil, actuation.Refuse(actuation.CodeBootFailed, "", "platform: %v", err)
	}
	cfg.SetPlatformVirtualMachineConfiguration(platform)
	for _, d := range p.Devices {
		switch d {
		case DeviceBlock:
			work, err := vz.NewDiskImageStorageDeviceAttachmentWithCacheAndSync(filepath.Join(dir, DiskName), false,
				vz.DiskImageCachingModeAutomatic, vz.DiskImageSynchronizationModeFsync)
			if err != nil {
				return nil, actuation.Refuse(actuation.CodeBootFailed, "", "working disk: %v", err)
			}
			workDev, err := vz.NewVirtioBlockDeviceConfiguration(work)
			if err != nil {
				return nil, actuation.Refuse(actuation.CodeBootFailed, "", "working disk: %v", err)
			}
			bind, err := vz.NewDiskImageStorageDeviceAttachment(filepath.Join(dir, BindingDiskName), true)
			if err != nil {
				return nil, actuation.Refuse(actuation.CodeBootFailed, "", "binding disk: %v", err)
			}
			bindDev, err := vz.NewVirtioBlockDeviceConfiguration(bind)
			if err != nil {
				return nil, actuation.Refuse(actuation.CodeBootFailed, "", "binding disk: %v", err)
			}
			if err := bindDev.SetBlockDeviceIdentifier(BindingDiskID); err != nil {
				return nil, actuation.Refuse(actuation.CodeBootFailed, "", "binding disk identifier: %v", err)
			}
			cfg.SetStorageDevicesVirtualMachineConfiguration([]vz.StorageDeviceConfiguration{workDev, bindDev})
		case DeviceVsock:
			sock, err := vz.NewVirtioSocketDeviceConfiguration()
			if err != nil {
				return nil, actuation.Refuse(actuation.CodeBootFailed, "", "vsock: %v", err)
			}
			cfg.SetSocketDevicesVirtualMachineConfiguration([]vz.SocketDeviceConfiguration{sock})
		case DeviceRNG:
			rng, err := vz.NewVirtioEntropyDeviceConfiguration()
			if err != nil {
				return nil, actuation.Refuse(actuation.CodeBootFailed, "", "rng: %v", err)
			}
			cfg.SetEntropyDevicesVirtualMachineConfiguration([]*vz.VirtioEntropyDeviceConfiguration{rng})
		case DeviceSerial:
			// Output only: the guest's input is /dev/null (end of file); its output goes
			// through a pipe into the bounded log.
			null, err := os.Open(os.DevNull)
			if err != nil {
				return nil, err
			}
			r, w, err := os.Pipe()
			if err != nil {
				_ = null.Close()
				return nil, err
			}
			log, err := OpenSerialLog(filepath.Join(dir, SerialLogName), b.cfg.SerialMaxBytes)
			if err != nil {
				_ = null.Close()
				_ = r.Close()
				_ = w.Close()
				return nil, err
			}
			v.serial, v.serialR, v.files = log, r, append(v.files, null, w)
			go func() { _, _ = io.Copy(log, r) }()
			att, err := vz.NewFileHandleSerialPortAttachment(null, w)
			if err != nil {
				return nil, actuation.Refuse(actuation.CodeBootFailed, "", "serial: %v", err)
			}
			serial, err := vz.NewVirtioConsoleDeviceSerialPortConfiguration(att)
			if err != nil {
				return nil, actuation.Refuse(actuation.CodeBootFailed, "", "serial: %v", err)
			}
			cfg.SetSerialPortsVirtualMachineConfiguration([]*vz.VirtioConsoleDeviceSerialPortConfiguration{serial})
		default:
			return nil, actuation.Refuse(actuation.CodeDeviceForbidden, "", "device %q is outside %s's closed profile", d, ID)
		}
	}
	// Nothing else is set: no network, directory sharing, graphics, keyboard, pointing,
	// audio, USB, balloon or console device (the framework attaches none by default).
	if ok, err := cfg.Validate(); !ok || err != nil {
		return nil, actuation.Refuse(actuation.CodeBootFailed, "", "the framework refused the configuration: %v", err)
	}
	return cfg, nil
}

// stop ends v's VM (the guest's own shutdown first, then a forced stop), closes its
// channel and serial, removes this boot's files and tombstones the record (the working
// disk stays: it is the environment's until teardown).
func (b *Backend) stop(v *vm, reason string) {
	if m := v.machine; m != nil {
		if m.CanRequestStop() {
			if ok, _ := m.RequestStop(); ok {
				t := time.NewTimer(b.cfg.ShutdownTimeout)
				for done := false; !done; {
					select {
					case s := <-m.StateChangedNotify():
						done = s == vz.VirtualMachineStateStopped || s == vz.VirtualMachineStateError
					case <-t.C:
						done = true
					}
				}
				t.Stop()
			}
		}
		if m.CanStop() {
			_ = m.Stop()
		}
	}
	if v.ln != nil {
		_ = v.ln.Close()
		<-v.served
	}
	for _, f := range v.files {
		_ = f.Close()
	}
	if v.serialR != nil {
		_ = v.serialR.Close()
	}
	if v.serial != nil {
		_ = v.serial.Close()
	}
	b.mu.Lock()
	if b.vms[v.rec.ID] == v {
		delete(b.vms, v.rec.ID)
	}
	b.mu.Unlock()
	_, _ = Apply(v.dir, v.rec, Decision{RemoveBoot: true, Tombstone: true, Message: reason})
}

// Inspect observes the VM now.
func (b *Backend) Inspect(_ context.Context, spec backends.Spec) (backends.Status, error) {
	p, err := BuildPlan(spec, b.cfg.Limits, b.cfg.Devices)
	if err != nil {
		return failed(err)
	}
	v := b.get(spec.ID)
	if v == nil {
		return backends.Status{Phase: backends.PhaseClosed, Message: "no VM runs for the environment in this process"}, nil
	}
	if s := v.machine.State(); s != vz.VirtualMachineStateRunning {
		return backends.Status{Phase: backends.PhaseFailed, Generation: v.rec.Generation, Message: fmt.Sprintf("the VM is %s", s)}, nil
	}
	return b.status(v, p), nil
}

// Drain marks the VM draining (its guest keeps running until teardown).
func (b *Backend) Drain(ctx context.Context, spec backends.Spec) (backends.Status, error) {
	defer b.locks.Lock(spec.ID)()
	v := b.get(spec.ID)
	if v == nil {
		return backends.Status{Phase: backends.PhaseClosed, Message: "no VM runs for the environment in this process"}, nil
	}
	v.rec.State = StateDraining
	if err := WriteRecord(v.dir, v.rec); err != nil {
		return failed(err)
	}
	return b.Inspect(ctx, spec)
}

// Teardown stops the VM and removes the whole VM directory, working disk included.
func (b *Backend) Teardown(_ context.Context, spec backends.Spec) (backends.Status, error) {
	if err := CheckID(spec.ID); err != nil {
		return failed(err)
	}
	defer b.locks.Lock(spec.ID)()
	if v := b.get(spec.ID); v != nil {
		b.stop(v, "teardown")
	}
	dir := b.dir(spec.ID)
	if err := os.RemoveAll(dir); err != nil {
		return backends.Status{Phase: backends.PhaseFailed, Residue: []string{dir}, Message: err.Error()}, err
	}
	if _, err := os.Lstat(dir); err == nil {
		return backends.Status{Phase: backends.PhaseFailed, Residue: []string{dir}, Message: "the VM directory survived teardown"}, nil
	}
	return backends.Status{Phase: backends.PhaseClosed, Message: "VM stopped, working disk and files removed"}, nil
}

// Recover sweeps <StateDir>/vfkit (Sweep, Decide): VMs of a previous process ended with
// it; their boot files are removed and their records tombstoned, working disks kept for
// known environments whose disk identity still matches.
func (b *Backend) Recover(ctx context.Context, known map[string]backends.Spec) ([]backends.RecoveryAction, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("recover %s: %w", ID, err)
	}
	return Sweep(b.root, known, b.cfg.Limits, func(dir string, rec *Record) Observation {
		return ObserveWith(rec, b.self, b.get(filepath.Base(dir)) != nil)
	})
}

// GuestSocket returns the hybrid-vsock socket of the environment's running VM and this
// boot's binding (for the node agent's guest client; hand the binding only to the
// agent's own processes).
func (b *Backend) GuestSocket(id string) (string, protocol.Binding, error) {
	v := b.get(id)
	if v == nil || v.rec.Socket == nil {
		return "", protocol.Binding{}, actuation.Refuse(actuation.CodeVMNotRunning, "", "no VM runs for environment %s on this node", id)
	}
	now, err := StatFile(v.rec.Socket.Path)
	if CompareFile(v.rec.Socket, now, err) != FileMatches {
		return "", protocol.Binding{}, actuation.Refuse(actuation.CodeBootFailed, "", "the guest socket of environment %s was replaced", id)
	}
	return v.rec.Socket.Path, v.rec.Binding, nil
}

func newNonce() (string, error) {
	var buf [protocol.NonceHexLen / 2]byte
	if _, err := rand.Read(buf[:]); err != nil {
		return "", fmt.Errorf("boot nonce: %w", err)
	}
	return hex.EncodeToString(buf[:]), nil
}

// fileDigest is sha256:<hex> of a file's content.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer func() { _ = f.Close() }()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return protocol.DigestPrefix + hex.EncodeToString(h.Sum(nil)), nil
}

var _ backends.Backend = (*Backend)(nil)
