package qemumicrovm

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"time"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// probeDir is the KVM probe VM's directory under vms/ (never a valid environment ID).
const probeDir = ".probe"

// Accelerator resolves the accelerator once and remembers it: "kvm" or "tcg" as
// configured, or for "auto" KVM only if a probe VM boots to the guest agent's handshake
// under accel=kvm (creating a KVM VM is not enough: a paravirtual /dev/kvm accepts the VM
// and the stock guest kernel then dies). reason says why. An error means the configured
// accelerator cannot boot anything.
func (b *Backend) Accelerator(ctx context.Context) (accel, reason string, err error) {
	return b.accelerator(ctx)
}

func (b *Backend) accelerator(ctx context.Context) (string, string, error) {
	b.accelMu.Lock()
	defer b.accelMu.Unlock()
	if b.accel != "" {
		return b.accel, b.accelReason, nil
	}
	accel, reason, final := b.probeKVM(ctx)
	if final {
		b.accel, b.accelReason = accel, reason
	}
	return accel, reason, nil
}

// probeKVM boots one small throwaway VM under accel=kvm. final is false when the probe
// was cut short by ctx (the answer is then not remembered).
func (b *Backend) probeKVM(ctx context.Context) (accel, reason string, final bool) {
	f, err := os.OpenFile("/dev/kvm", os.O_RDWR, 0)
	if err != nil {
		return AccelTCG, fmt.Sprintf("no usable /dev/kvm (%v): TCG", err), true
	}
	_ = f.Close()
	img := &backends.BootImage{KernelPath: b.cfg.ProbeKernel, InitrdPath: b.cfg.ProbeInitrd, CommandLine: "console=ttyS0 panic=-1 quiet"}
	files, err := b.openBoot(img, false)
	if err != nil {
		return AccelTCG, fmt.Sprintf("no probe image to test KVM with (%v): TCG", err), true
	}
	defer files.Close()
	dir := filepath.Join(b.vmsDir, probeDir)
	_, _ = b.destroyDir(dir, true) // a previous probe's leftovers; what survives shows in the teardowns below
	nonce, err := newNonce()
	if err != nil {
		return AccelTCG, err.Error(), false
	}
	rec := &Record{ID: probeDir, Ref: "kvm-probe", State: StateLaunching, Generation: 1,
		Binding: protocol.Binding{EnvironmentRef: "workbench/kvm-probe", SourceGeneration: 1, PlanDigest: protocol.DigestOf([]byte("kvm-probe")),
			ImageDigest: imageDigest(img), GuestCID: guestCID, BootNonce: nonce},
		Accel: AccelKVM, VCPUs: 1, MemoryMiB: 256, Kernel: FileRef{Path: img.KernelPath}, Initrd: FileRef{Path: img.InitrdPath},
		CommandLine: img.CommandLine, Devices: b.devices()}
	start := time.Now()
	v, err := b.launch(ctx, dir, rec, files, b.cfg.ProbeTimeout, nil)
	if err != nil {
		left, derr := b.destroyDir(dir, true)
		note := teardownNote(left, derr, nil, nil)
		if ctx.Err() != nil {
			return AccelTCG, "KVM probe interrupted: " + ctx.Err().Error() + note, false
		}
		return AccelTCG, "a probe VM did not boot under accel=kvm (" + protocol.Truncate(err.Error()) + "): TCG" + note, true
	}
	took := time.Since(start)
	left, derr := b.destroyVM(ctx, v, true)
	return AccelKVM, fmt.Sprintf("a probe VM booted to the guest agent's handshake under accel=kvm in %v", took.Round(time.Millisecond)) + teardownNote(left, derr, nil, nil), true
}

func (b *Backend) loadInfo() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, b.qemuBin, "--version").Output()
	if err == nil {
		// "QEMU emulator version 7.2.22 (Debian 1:7.2+dfsg-7+deb12u18+b3)"
		line, _, _ := strings.Cut(string(out), "\n")
		if f := strings.Fields(strings.TrimPrefix(line, "QEMU emulator version ")); len(f) > 0 {
			b.qemuVersion = protocol.Truncate(f[0])
		}
	}
	if len(b.qemuVersion) > 63 || b.qemuVersion == "" {
		b.qemuVersion = "unknown"
	}
	if f, err := os.Open(b.qemuBin); err == nil {
		h := sha256.New()
		if _, err := io.Copy(h, io.LimitReader(f, 1<<30)); err == nil {
			b.qemuDigest = protocol.DigestPrefix + hex.EncodeToString(h.Sum(nil))
		}
		_ = f.Close()
	}
}

// ErrNoAccelerator: the configured accelerator does not boot a guest on this node.
var ErrNoAccelerator = errors.New("qemu-microvm.v1: the configured accelerator boots no guest here")

// Capability is the honest descriptor of this backend on this node, from what was
// measured: isolationClass hardware-vm only when a VM booted to the handshake under KVM,
// emulated-vm under TCG (a full-system guest whose isolation rests on QEMU's software
// emulation, not on hardware virtualization; see docs/vocabulary.md). The device set is
// exactly what is attached; there is no NIC and no host share. For Accel "kvm" the probe
// runs too, and a failed probe is ErrNoAccelerator (nothing is claimed).
func (b *Backend) Capability() (actuation.Capability, error) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.ProbeTimeout+10*time.Second)
	defer cancel()
	accel, _, err := b.accelerator(ctx)
	if err != nil {
		return actuation.Capability{}, err
	}
	if b.cfg.Accel == AccelKVM {
		b.accelMu.Lock()
		if b.accelReason == "configured" {
			if _, r, final := b.probeKVM(ctx); final {
				b.accelReason = r
			}
		}
		reason := b.accelReason
		b.accelMu.Unlock()
		if !strings.HasPrefix(reason, "a probe VM booted") {
			return actuation.Capability{}, fmt.Errorf("%w: %s", ErrNoAccelerator, reason)
		}
	}
	b.infoOnce.Do(b.loadInfo)
	arch := "x86_64"
	if runtime.GOARCH == "arm64" {
		arch = "arm64"
	}
	iso, platform := "emulated-vm", "linux-tcg-"+arch
	if accel == AccelKVM {
		iso, platform = "hardware-vm", "linux-kvm-"+arch
	}
	fidelity, formats, devices, enforce := b.systemProfile()
	return actuation.Capability{
		BackendID: ID, Provider: "qemu", Version: b.qemuVersion, BinaryDigest: b.qemuDigest, PlatformRef: platform,
		Locality: "local-only", HostArchitecture: arch, GuestArchitecture: "x86_64",
		IsolationClass: iso, SystemFidelity: fidelity,
		ControlTransport: "virtio-vsock", ControlGuestEndpoint: "af-vsock", ControlHostEndpoint: "unix-domain-socket",
		ControlChannelBinding: "environment-generation-boot-nonce", BootMode: "direct-kernel",
		StorageFormats: formats, DeviceClasses: devices, ConsoleMode: "diagnostic-output-only",
		NetworkProfiles: []string{"none"}, HostFilesystemSharing: "denied", CredentialInjection: "denied",
		ResourceEnforcement: enforce,
		LifecycleOperations: []string{"allocate", "start", "inspect", "drain", "teardown", "recover"},
	}, nil
}

// DefaultSystemDisk is the full-system base make guest-image builds (beneath ImageDir).
const DefaultSystemDisk = "guest-system/rootfs.raw"

// systemProfile is what this node's images make of the capability: full-system-linux,
// raw disks, virtio-block, per-command guest pids limits and a storage reservation only
// when the full-system base exists beneath the image directory and a working-disk pool is
// configured; otherwise the minimal initramfs variant (the agent as PID 1, no init system,
// no disk) is all it offers, which is process-runtime fidelity.
func (b *Backend) systemProfile() (fidelity string, formats, devices, enforce []string) {
	devices, enforce = b.devices(), b.resourceEnforcement()
	rel := b.cfg.SystemDisk
	if rel == "" {
		rel = DefaultSystemDisk
	}
	full := false
	if b.cfg.Disks != nil && fsaccess.CheckRel(rel, true) == nil {
		if root, err := fsaccess.OpenRoot(b.cfg.ImageDir); err == nil {
			if f, _, err := root.OpenRead(rel); err == nil {
				full = true
				_ = f.Close()
			}
			_ = root.Close()
		}
	}
	if !full {
		return "process-runtime", []string{"kernel-initrd-rootfs"}, devices, enforce
	}
	devices = append(devices, "virtio-block")
	enforce = append(enforce, "guest-pids", "guest-storage", "host-storage")
	sort.Strings(devices)
	sort.Strings(enforce)
	enforce = slices.Compact(enforce)
	return "full-system-linux", []string{"kernel-initrd-rootfs", "raw"}, devices, enforce
}
