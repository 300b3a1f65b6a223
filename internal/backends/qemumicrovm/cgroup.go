package qemumicrovm

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"sensorium.dev/workbench/internal/platform/cgroups"
)

// VMM cgroup limits. QEMU's own memory beyond the guest's (device emulation, TCG's
// translation cache, I/O buffers) measured ~250 MiB RSS in total for a 512 MiB TCG guest;
// the overhead leaves room for that and the vsock device (~4 MiB).
const (
	VMMOverheadMiB = 512
	VMMPids        = 512
)

// vmCgroup creates the cgroup of the VM in dir (named after the directory, i.e. the
// environment ID). Nil without a cgroup manager.
func (b *Backend) vmCgroup(dir string, rec *Record) (*cgroups.Group, error) {
	if b.cfg.Cgroups == nil {
		return nil, nil
	}
	l := cgroups.Limits{
		Pids:        VMMPids,
		MemoryBytes: (int64(rec.MemoryMiB) + VMMOverheadMiB) << 20,
		CPUMillis:   (int64(rec.VCPUs) + 1) * 1000,
	}
	g, err := b.cfg.Cgroups.Create(cgroups.KindVM, filepath.Base(dir), l)
	if err != nil {
		return nil, fmt.Errorf("VMM cgroup: %w", err)
	}
	return g, nil
}

// removeVMCgroup kills whatever is left in the VM's cgroup and removes it. It returns
// what survived, for the caller's residue report.
func (b *Backend) removeVMCgroup(dir string) []string {
	if b.cfg.Cgroups == nil {
		return nil
	}
	name, err := cgroups.GroupName(cgroups.KindVM, filepath.Base(dir))
	if err != nil {
		return nil
	}
	g, err := b.cfg.Cgroups.Load(name)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return []string{fmt.Sprintf("cgroup %s: %v", name, err)}
	}
	rep, kerr := g.Kill()
	if err := errors.Join(kerr, g.Delete()); err != nil {
		return []string{fmt.Sprintf("cgroup %s: %s: %v", g.Path(), rep.Summary(), err)}
	}
	return nil
}

// resourceEnforcement is the capability's resourceEnforcement: the guest's vCPUs and
// memory (QEMU's -smp and -m), the channel bounds, and, with the VMM in a cgroup, the
// host-side memory, CPU and process bounds of the VMM itself.
func (b *Backend) resourceEnforcement() []string {
	out := []string{"channel-bounds", "guest-memory", "guest-vcpu"}
	if b.cfg.Cgroups != nil {
		out = append(out, b.cfg.Cgroups.Enforced()...)
	}
	return out
}
