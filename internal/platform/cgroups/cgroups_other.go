//go:build !linux

package cgroups

import (
	"fmt"
	"os/exec"
	"time"
)

// cgroup2Magic never matches off Linux: detectMode reports ModeUnavailable there.
const cgroup2Magic = 0x63677270

// Off Linux there are no cgroups: a Manager is always ModeUnavailable, and these refuse.

func (g *Group) createV1() error { return fmt.Errorf("%w: cgroups v1 is Linux-only", ErrUnavailable) }

func (g *Group) updateV1(Limits) error {
	return fmt.Errorf("%w: cgroups v1 is Linux-only", ErrUnavailable)
}

func (g *Group) killV1(time.Time) ([]Proc, error) {
	return nil, fmt.Errorf("%w: cgroups v1 is Linux-only", ErrUnavailable)
}

// StartCmd refuses off Linux: a process cannot be started inside a cgroup there.
func (g *Group) StartCmd(*exec.Cmd) error {
	return fmt.Errorf("%w: starting a process in a cgroup is Linux-only", ErrUnavailable)
}

// hostLayout: off Linux no cgroup layout is mounted.
func hostLayout() Mode { return ModeUnavailable }

func (g *Group) createV2() error { return fmt.Errorf("%w: cgroups v2 is Linux-only", ErrUnavailable) }

func (g *Group) updateV2(Limits) error {
	return fmt.Errorf("%w: cgroups v2 is Linux-only", ErrUnavailable)
}

func (g *Group) killV2([]int, time.Time) ([]Proc, error) {
	return nil, fmt.Errorf("%w: cgroups v2 is Linux-only", ErrUnavailable)
}
