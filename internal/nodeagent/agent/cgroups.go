package agent

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"strings"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/nodeagent/store"
	"sensorium.dev/workbench/internal/platform/cgroups"
)

// CgroupsConfig configures the cgroups of the processes the agent starts on the host.
type CgroupsConfig struct {
	// Parent is the cgroup path (relative to each hierarchy's root) under which every
	// command, session and VMM group lives. Default: workbench/<12 hex digits of the
	// SHA-256 of the state directory>, so two agents on one machine (tests, run-local)
	// never sweep each other's groups while one agent keeps the same parent across
	// restarts.
	Parent string `json:"parent,omitempty"`
}

// cgroupParent resolves the configured (or default) parent.
func cgroupParent(cfg Config) string {
	if cfg.Cgroups != nil && cfg.Cgroups.Parent != "" {
		return cfg.Cgroups.Parent
	}
	sum := sha256.Sum256([]byte(filepath.Clean(cfg.StateDir)))
	return cgroups.DefaultParent + "/" + hex.EncodeToString(sum[:6])
}

// CgroupParent is the cgroup parent under which an agent with cfg places every command,
// session and VM group (a test harness releases what its agent left with it).
func CgroupParent(cfg Config) string { return cgroupParent(cfg) }

// newCgroups detects the node's cgroup layout. A node without the controllers still gets
// a manager: every command and session is then refused with cgroup-unavailable, and the
// capabilities stop claiming host-process enforcement.
func newCgroups(cfg Config) (*cgroups.Manager, error) {
	m, err := cgroups.NewManager(cgroups.Config{Parent: cgroupParent(cfg)})
	if err != nil {
		return nil, fmt.Errorf("node agent cgroups: %w", err)
	}
	return m, nil
}

// environmentLimits are the cgroup limits of one command or session of env: the
// Environment's resources (pids, memoryMiB, vcpus as a CPU quota); unset fields take the
// command defaults (procexec.ResolveLimits: 1024 pids, 2 GiB, no CPU quota).
func environmentLimits(env *wbv1.Environment) cgroups.Limits {
	var l cgroups.Limits
	if res := env.Spec.Resources; res != nil {
		l.Pids = int64(deref(res.PIDs))
		l.MemoryBytes = int64(deref(res.MemoryMiB)) << 20
		l.CPUMillis = int64(deref(res.VCPUs)) * 1000
	}
	return l
}

// hostEnforcement is BackendCapability.resourceEnforcement for the host backends:
// channel-bounds always; host-process, host-memory and host-cpu only when every command
// and session really gets its cgroup.
func (a *Agent) hostEnforcement() []string {
	out := []string{"channel-bounds"}
	if a.cgroups != nil {
		out = append(out, a.cgroups.Enforced()...)
	}
	return out
}

// sweepCgroups removes the command and session groups a previous agent process left (all
// of them: nothing it ran is trusted to still be wanted) and empty VM groups; VM groups
// with live processes belong to VMs the backend re-adopts or tears down itself.
func (a *Agent) sweepCgroups(report func(resource, outcome, msg string)) {
	if a.cgroups == nil || !a.cgroups.Available() {
		return
	}
	keep := func(name string) bool {
		if !strings.HasPrefix(name, string(cgroups.KindVM)+"-") {
			return false
		}
		g, err := a.cgroups.Load(name)
		if err != nil {
			return false
		}
		pids, err := g.Pids()
		return err != nil || len(pids) > 0
	}
	rep, err := a.cgroups.Sweep(keep)
	for _, n := range rep.Removed {
		report("cgroup "+a.cgroups.Parent()+"/"+n, store.OutcomeTerminated, "removed")
	}
	if rep.Killed > 0 {
		report("cgroups "+a.cgroups.Parent(), store.OutcomeTerminated, fmt.Sprintf("killed %d leftover process(es)", rep.Killed))
	}
	if err != nil {
		report("cgroups "+a.cgroups.Parent(), store.OutcomeFailedRetryable, err.Error())
	}
}
