// Package vfkitsystem implements the vfkit-system.v1 EnvironmentBackend: one full-system
// arm64 Linux guest per environment on macOS, run in the node agent's own process by
// Apple's Virtualization framework through github.com/Code-Hex/vz/v3. The guest boots
// through EFI from an APFS clone (clonefile) of the image's pinned raw base disk, with its
// own EFI variable store, and sees exactly the closed device profile of seed 000 §7.2:
//
//   - virtio-block: the working disk (read-write) and the boot's binding disk (read-only,
//     4 KiB: the handshake binding the guest agent reads with --binding-file);
//   - virtio-vsock: the control channel; its host side is vz's socket device, served to
//     the node agent as the same hybrid-vsock Unix socket as qemu-microvm.v1 (CONNECT
//     <port>), so the guest protocol and the agent's client are unchanged;
//   - virtio-rng;
//   - diagnostic-serial: output only (the guest reads end-of-file), bounded on the host.
//
// No virtio-fs, no Rosetta, no directory share, no NIC, no graphics, no keyboard or
// pointer, no audio, no USB, no balloon: a plan that asks for any is refused
// (device-forbidden) before anything is configured, and again by the darwin builder.
//
// Layout under <StateDir>/vfkit/<ID> (every level 0700):
//
//	record.json   the recovery record (written before boot, completed after each step)
//	disk.raw      the working disk: an APFS clone of the base, grown to the plan's size
//	efi.vars      this environment's EFI variable store
//	binding.img   this boot's binding (0400), attached read-only
//	g.sock        hybrid-vsock host socket (CONNECT 1024 reaches the agent)
//	serial.log    bounded diagnostic serial (never logged)
//
// Everything platform-neutral — the plan, the device profile, the record and the
// recovery decisions — is in files without build tags and tested on Linux; only the vz
// calls, clonefile and the macOS process identity are darwin-only (make darwin-check
// type-checks them against the real vz module). No Kubernetes imports.
package vfkitsystem

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
)

// ID is the backend identifier (spec.backend).
const ID = actuation.BackendVfkitSystem

// The closed device profile (actuation's deviceClasses vocabulary).
const (
	DeviceBlock  = "virtio-block"
	DeviceVsock  = "virtio-vsock"
	DeviceRNG    = "virtio-rng"
	DeviceSerial = "diagnostic-serial"
)

// Profile is the closed device set of vfkit-system.v1, sorted.
var Profile = []string{DeviceSerial, DeviceBlock, DeviceRNG, DeviceVsock}

// forbiddenDevices names what the Virtualization framework could attach and this backend
// never does, with why; anything else outside Profile is refused as unknown.
var forbiddenDevices = map[string]string{
	"virtio-fs":        "a host directory share",
	"directory-share":  "a host directory share",
	"rosetta":          "Rosetta (a host translation share)",
	"virtio-net":       "a NIC",
	"nat-network":      "a NIC",
	"bridged-network":  "a NIC",
	"graphics":         "a graphics device",
	"virtio-gpu":       "a graphics device",
	"keyboard":         "an input device",
	"pointing-device":  "an input device",
	"audio":            "an audio device",
	"usb":              "a USB controller",
	"memory-balloon":   "a memory balloon (guest memory the host reclaims)",
	"virtio-console":   "an interactive console (the serial is output-only)",
	"spice-agent":      "a clipboard share",
	"gdb-stub":         "a debug stub",
	"nvme":             "a storage controller outside virtio-block",
	"usb-mass-storage": "a storage controller outside virtio-block",
}

// Defaults and bounds.
const (
	DefaultMaxVMs         = 2
	DefaultMaxMemoryMiB   = 8192
	DefaultVCPUs          = 2
	DefaultMemoryMiB      = 1024
	MinMemoryMiB          = 256
	DefaultDiskMiB        = 8192
	MaxDiskMiB            = 1 << 20 // 1 TiB virtual
	DefaultBootTimeout    = 60 * time.Second
	DefaultSerialMaxBytes = 256 << 10
	MaxIDBytes            = 128
	MaxRoots              = 32
	// BindingDiskBytes is the size of the binding disk: one 4 KiB block holding the
	// binding JSON padded with spaces (JSON whitespace), the guest agent's binding cap.
	BindingDiskBytes = 4096
	// BindingDiskID is the binding disk's virtio-blk serial: the guest finds it at
	// /dev/disk/by-id/virtio-<BindingDiskID>.
	BindingDiskID = "wb-binding"
	// GuestBindingFile is what the full-system arm64 variant's agent unit passes as
	// --binding-file.
	GuestBindingFile = "/dev/disk/by-id/virtio-" + BindingDiskID
	// GuestBindingDeviceUnit is systemd's device unit for GuestBindingFile (systemd-escape
	// --path): the agent unit requires it and starts after it.
	GuestBindingDeviceUnit = `dev-disk-by\x2did-virtio\x2dwb\x2dbinding.device`
	// GuestAgentCommand is the full-system image's agent command line (its unit's
	// ExecStart) without a binding file.
	GuestAgentCommand = "/usr/local/sbin/workbench-guest --root /workspace --state-dir /run/workbench"
	// DiskFormatRaw is the only working-disk format (explicit, never autodetected; no
	// backing chain: the clone is a whole file that shares blocks copy-on-write).
	DiskFormatRaw = "raw"
	// maxSocketPath is the longest Unix socket path on macOS (sun_path is 104 bytes with a NUL).
	maxSocketPath = 103
)

// Limits are the node operator's bounds on one VM.
type Limits struct {
	MaxVCPUs     int32
	MaxMemoryMiB int32
	MaxDiskMiB   int32
}

// DiskPlan is the working disk of a plan.
type DiskPlan struct {
	// BasePath is relative to the image directory; BaseDigest pins its content.
	BasePath   string `json:"basePath"`
	BaseDigest string `json:"baseDigest"`
	Format     string `json:"format"`
	// VirtualMiB is the disk's fixed virtual size (the clone grown sparsely to it).
	VirtualMiB int32 `json:"virtualMiB"`
}

// Plan is the normalized VM plan of one environment; its digest is what the handshake
// binds as the plan.
type Plan struct {
	Backend        string   `json:"backend"`
	ID             string   `json:"id"`
	Ref            string   `json:"ref"`
	SpecPlanDigest string   `json:"specPlanDigest,omitempty"`
	Architecture   string   `json:"architecture"`
	BootMode       string   `json:"bootMode"`
	VCPUs          int32    `json:"vcpus"`
	MemoryMiB      int32    `json:"memoryMiB"`
	Variant        string   `json:"variant,omitempty"`
	Disk           DiskPlan `json:"disk"`
	Devices        []string `json:"devices"`
	Network        string   `json:"network"`
	HostSharing    string   `json:"hostSharing"`
	Roots          []string `json:"roots"`
	ReadOnlyRoots  []string `json:"readOnlyRoots,omitempty"`
}

// Digest is the plan's sha256 over its canonical JSON.
func (p *Plan) Digest() string {
	data, _ := json.Marshal(p)
	h := sha256.Sum256(data)
	return protocol.DigestPrefix + hex.EncodeToString(h[:])
}

// MountedRoots are the plan's roots as the guest serves them.
func (p *Plan) MountedRoots() []backends.MountedRoot {
	out := make([]backends.MountedRoot, 0, len(p.Roots))
	for _, r := range p.Roots {
		out = append(out, backends.MountedRoot{Name: r, GuestDir: r, ReadOnly: slices.Contains(p.ReadOnlyRoots, r)})
	}
	return out
}

func refuse(code actuation.Code, format string, args ...any) error {
	return actuation.Refuse(code, "", format, args...)
}

var idPattern = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]*$`)

// CheckID refuses an environment ID unusable as a directory name.
func CheckID(id string) error {
	if len(id) == 0 || len(id) > MaxIDBytes || !idPattern.MatchString(id) {
		return refuse(actuation.CodeEnvironmentIDInvalid, "environment ID %q must be 1..%d bytes of [A-Za-z0-9._-], not starting with '.', '_' or '-'", id, MaxIDBytes)
	}
	return nil
}

// CheckSocketPath refuses a VM directory whose control socket path exceeds the macOS
// Unix socket limit.
func CheckSocketPath(path string) error {
	if len(path) > maxSocketPath {
		return refuse(actuation.CodeStateDirTooLong, "socket path %q is %d bytes, at most %d: use a shorter stateDir", path, len(path), maxSocketPath)
	}
	return nil
}

// CheckDeviceProfile refuses any device outside the closed profile, naming what a
// forbidden one would have been, and any device listed twice.
func CheckDeviceProfile(devices []string) error {
	seen := map[string]bool{}
	for _, d := range devices {
		if why, ok := forbiddenDevices[strings.ToLower(d)]; ok {
			return refuse(actuation.CodeDeviceForbidden, "%s asks for %q, %s: %s attaches only %v", "the plan", d, why, ID, Profile)
		}
		if !slices.Contains(Profile, d) {
			return refuse(actuation.CodeDeviceForbidden, "the plan asks for device %q, outside %s's closed profile %v", d, ID, Profile)
		}
		if seen[d] {
			return refuse(actuation.CodeDeviceForbidden, "the plan lists device %q twice", d)
		}
		seen[d] = true
	}
	for _, d := range Profile {
		if !seen[d] {
			return refuse(actuation.CodeDeviceForbidden, "the plan lacks device %q of the closed profile %v", d, Profile)
		}
	}
	return nil
}

// CheckPlan validates a plan (a fresh one, or one read back from a record) completely:
// identity, resources, disk, the closed device profile, no network, no host sharing.
func CheckPlan(p *Plan, lim Limits) error {
	if p.Backend != ID {
		return refuse(actuation.CodeCapabilityMismatch, "plan of backend %q, not %s", p.Backend, ID)
	}
	if err := CheckID(p.ID); err != nil {
		return err
	}
	if p.Architecture != "arm64" || p.BootMode != "efi" {
		return refuse(actuation.CodeImageInvalid, "%s boots the arm64 EFI variant, not %s/%s", ID, p.Architecture, p.BootMode)
	}
	switch {
	case p.VCPUs < 1 || p.MemoryMiB < MinMemoryMiB:
		return refuse(actuation.CodeResourcesInvalid, "%d vCPUs and %d MiB; at least 1 vCPU and %d MiB", p.VCPUs, p.MemoryMiB, MinMemoryMiB)
	case p.VCPUs > lim.MaxVCPUs || p.MemoryMiB > lim.MaxMemoryMiB:
		return refuse(actuation.CodeResourcesAboveMax, "%d vCPUs and %d MiB; this node allows at most %d vCPUs and %d MiB per VM", p.VCPUs, p.MemoryMiB, lim.MaxVCPUs, lim.MaxMemoryMiB)
	case p.Disk.VirtualMiB < 1 || p.Disk.VirtualMiB > lim.MaxDiskMiB:
		return refuse(actuation.CodeResourcesAboveMax, "a %d MiB working disk; this node allows 1..%d MiB per VM", p.Disk.VirtualMiB, lim.MaxDiskMiB)
	}
	if p.Disk.Format != DiskFormatRaw {
		return refuse(actuation.CodeImageInvalid, "disk format %q: %s attaches raw disks only (explicit, no autodetection, no backing chain)", p.Disk.Format, ID)
	}
	if err := checkRelPath(p.Disk.BasePath); err != nil {
		return err
	}
	if !actuation.IsDigest(p.Disk.BaseDigest) {
		return refuse(actuation.CodeImageInvalid, "base disk digest %q is not sha256:<64 lowercase hex>", p.Disk.BaseDigest)
	}
	if err := CheckDeviceProfile(p.Devices); err != nil {
		return err
	}
	if p.Network != "none" {
		return refuse(actuation.CodeDeviceForbidden, "network %q: %s attaches no NIC", p.Network, ID)
	}
	if p.HostSharing != "denied" {
		return refuse(actuation.CodeDeviceForbidden, "host sharing %q: %s shares no host directory", p.HostSharing, ID)
	}
	if len(p.Roots) == 0 || len(p.Roots) > MaxRoots {
		return refuse(actuation.CodeRootInvalid, "%d roots, want 1..%d", len(p.Roots), MaxRoots)
	}
	for i, r := range p.Roots {
		if ref := actuation.ValidateRootName(r); ref != nil {
			return refuse(actuation.CodeRootInvalid, "roots[%d]: %s", i, ref.Message)
		}
		if slices.Contains(p.Roots[:i], r) {
			return refuse(actuation.CodeRootInvalid, "roots[%d] %q is duplicated", i, r)
		}
	}
	return nil
}

func checkRelPath(p string) error {
	if p == "" || strings.HasPrefix(p, "/") || slices.Contains(strings.Split(p, "/"), "..") || strings.ContainsRune(p, 0) {
		return refuse(actuation.CodeImageInvalid, "image path %q must be relative to the image directory, without ..", p)
	}
	return nil
}

// BuildPlan validates spec and builds its plan. The device list is always the closed
// profile; extra is what the node's configuration asks to add (refused when non-empty:
// the profile is closed, and a configuration that names a device fails loudly instead of
// being ignored).
func BuildPlan(spec backends.Spec, lim Limits, extra []string) (*Plan, error) {
	wrap := func(err error) (*Plan, error) { return nil, fmt.Errorf("environment %s: %w", spec.Ref, err) }
	if err := CheckID(spec.ID); err != nil {
		return wrap(err)
	}
	if spec.Boot != nil {
		return wrap(refuse(actuation.CodeImageInvalid, "%s boots through EFI from a disk; a direct-kernel boot image is not accepted", ID))
	}
	img := spec.EFI
	if img == nil {
		return wrap(refuse(actuation.CodeImageInvalid, "no EFI boot variant: %s needs an ImageManifest variant with bootMode efi, architecture arm64 and a raw disk", ID))
	}
	p := &Plan{Backend: ID, ID: spec.ID, Ref: spec.Ref, SpecPlanDigest: spec.PlanDigest, Architecture: img.Architecture, BootMode: "efi",
		VCPUs: spec.VCPUs, MemoryMiB: spec.MemoryMiB, Variant: img.Variant,
		Disk:    DiskPlan{BasePath: img.DiskPath, BaseDigest: img.DiskDigest, Format: img.DiskFormat, VirtualMiB: spec.DiskMiB},
		Devices: append(slices.Clone(Profile), extra...), Network: "none", HostSharing: "denied"}
	if p.VCPUs == 0 {
		p.VCPUs = DefaultVCPUs
	}
	if p.MemoryMiB == 0 {
		p.MemoryMiB = DefaultMemoryMiB
	}
	if p.Disk.VirtualMiB == 0 {
		p.Disk.VirtualMiB = DefaultDiskMiB
	}
	for i, r := range spec.Roots {
		if r.HostPath != "" || r.Source != "" {
			// A root that names a host directory would need a virtio-fs share.
			return wrap(refuse(actuation.CodeDeviceForbidden, "roots[%d] names a host directory, which would need virtio-fs: %s shares no host directory; a root is a directory inside the guest", i, ID))
		}
		p.Roots = append(p.Roots, r.Name)
		if r.ReadOnly {
			p.ReadOnlyRoots = append(p.ReadOnlyRoots, r.Name)
		}
	}
	if err := CheckPlan(p, lim); err != nil {
		return wrap(err)
	}
	return p, nil
}

// BindingDisk renders the binding disk's content: the binding's JSON padded with spaces
// to exactly BindingDiskBytes (a strict JSON decoder accepts trailing whitespace).
func BindingDisk(b protocol.Binding) ([]byte, error) {
	if err := b.Validate(); err != nil {
		return nil, fmt.Errorf("binding: %w", err)
	}
	data, err := json.Marshal(b)
	if err != nil {
		return nil, fmt.Errorf("binding: %w", err)
	}
	if len(data) > BindingDiskBytes-1 {
		return nil, fmt.Errorf("binding of %d bytes exceeds the %d-byte binding disk", len(data), BindingDiskBytes)
	}
	return append(data, bytes.Repeat([]byte{' '}, BindingDiskBytes-len(data))...), nil
}

// GuestAgentDropIn is the systemd drop-in the arm64 variant adds to the guest agent's unit
// (hack/guest-image/system/vfkit-binding.conf, installed by agent-unit.sh arm64): the
// agent reads its binding from the read-only binding disk this backend attaches (there is
// no fw_cfg under the Virtualization framework) and starts only once udev has created
// that device. Comments aside, the file must read exactly this (a test checks).
func GuestAgentDropIn() string {
	return "[Unit]\n" +
		"Requires=" + GuestBindingDeviceUnit + "\n" +
		"After=" + GuestBindingDeviceUnit + "\n" +
		"\n" +
		"[Service]\n" +
		"ExecStart=\n" +
		"ExecStart=" + GuestAgentCommand + " --binding-file=" + GuestBindingFile + "\n"
}
