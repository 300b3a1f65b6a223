//go:build linux

package cgroups

import (
	cg "github.com/containerd/cgroups/v3"
	"golang.org/x/sys/unix"
)

const cgroup2Magic = unix.CGROUP2_SUPER_MAGIC

// hostLayout is the layout mounted at /sys/fs/cgroup when its filesystem type is not
// cgroup2 (legacy or hybrid hierarchies), as containerd's detection reports it.
func hostLayout() Mode {
	switch cg.Mode() {
	case cg.Legacy, cg.Hybrid:
		return ModeV1
	case cg.Unified:
		return ModeV2
	}
	return ModeUnavailable
}
