//go:build darwin

package main

// prepareHost has nothing to ready on darwin: the node's only backend is vfkit-system.v1
// (the guest runs every process), no host process is started, and there is nothing to
// reap (procexec refuses every host-process start there with userns-unavailable).
func prepareHost() error { return nil }
