//go:build darwin

package agent

import (
	"errors"
	"runtime/debug"

	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/vfkitsystem"
	"sensorium.dev/workbench/internal/platform/cgroups"
)

// defaultBackends is a macOS node's backend set: vfkit-system.v1 alone. The host-local
// sandbox, fixture copies on loop disks and qemu need Linux (openat2, namespaces,
// cgroups, loop devices) and are not offered here. The VM settings come from the
// config's qemu section (imageDir, maxVMs, maxMemoryMiB; its qemu-only fields are unused).
func defaultBackends(cfg Config, _ *cgroups.Manager, _ storage) ([]backends.Backend, error) {
	q := cfg.QEMU
	if q == nil || !q.Enabled || q.ImageDir == "" {
		return nil, errors.New("node agent config: a macOS node offers only vfkit-system.v1: set qemu.enabled and qemu.imageDir (APFS)")
	}
	b, err := vfkitsystem.New(vfkitsystem.Config{StateDir: cfg.StateDir, ImageDir: q.ImageDir, MaxVMs: q.MaxVMs,
		Limits: vfkitsystem.Limits{MaxMemoryMiB: q.MaxMemoryMiB}})
	if err != nil {
		return nil, err
	}
	return []backends.Backend{vfkitBackend{b}}, nil
}

// vfkitBackend attests the backend's descriptor through the node report's capabilityReporter
// (internal/nodeagent/nodereport).
type vfkitBackend struct{ *vfkitsystem.Backend }

func (b vfkitBackend) Capability() (actuation.Capability, error) {
	version := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	macOS, err := unix.Sysctl("kern.osproductversion")
	if err != nil || macOS == "" {
		return actuation.Capability{}, errors.New("vfkit-system.v1: cannot read the macOS version (sysctl kern.osproductversion)")
	}
	return b.Backend.Capability(version, macOS), nil
}
