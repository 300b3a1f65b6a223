//go:build darwin

// Package linuxdep imports, in darwin code, a pure-Go dependency that does not build for
// darwin (containerd's cgroups): its own code is fine, the build is not.
package linuxdep

import cg "github.com/containerd/cgroups/v3"

// Unified reports whether the host runs the unified cgroup hierarchy.
func Unified() bool { return cg.Mode() == cg.Unified }
