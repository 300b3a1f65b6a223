//go:build linux

package agent

import (
	"path/filepath"

	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/fixturecopy"
	"sensorium.dev/workbench/internal/backends/hostlocal"
	"sensorium.dev/workbench/internal/backends/qemumicrovm"
	"sensorium.dev/workbench/internal/platform/cgroups"
	"sensorium.dev/workbench/internal/platform/fixture"
)

// defaultBackends is a Linux node's backend set: host-local, fixture-copy and (when
// configured) qemu-microvm.
func defaultBackends(cfg Config, cg *cgroups.Manager, st storage) ([]backends.Backend, error) {
	fd := st.fixtureDisks(cfg.StateDir)
	bs := []backends.Backend{
		hostlocal.New(cfg.AdmittedRoots),
		fixturecopy.New(filepath.Join(cfg.StateDir), cfg.AdmittedRoots, fixture.Limits{}).WithDisks(fd),
	}
	if q := cfg.QEMU; q != nil && q.Enabled {
		// VM working disks count against the same node-wide reservation as fixture disks.
		vm, err := qemumicrovm.New(qemumicrovm.Config{StateDir: cfg.StateDir, ImageDir: q.ImageDir, QEMUBinary: q.QEMUBinary,
			VhostDeviceVsock: q.VhostDeviceVsock, Accel: q.Accel, MaxVMs: q.MaxVMs, MaxMemoryMiB: q.MaxMemoryMiB, Cgroups: cg,
			Disks: fd.Pool.Sibling(filepath.Join(fd.Pool.Dir(), "..", qemumicrovm.DisksDir))})
		if err != nil {
			return nil, err
		}
		bs = append(bs, vm)
	}
	return bs, nil
}
