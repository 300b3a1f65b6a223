//go:build linux

package cgroups

import "golang.org/x/sys/unix"

const cgroup2Magic = unix.CGROUP2_SUPER_MAGIC
