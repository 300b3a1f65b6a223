//go:build linux

package main

import "sensorium.dev/workbench/internal/platform/procexec"

// prepareHost readies this process for the host-process backends: it becomes a child
// subreaper so it can reap whatever a killed process group left behind.
func prepareHost() error { return procexec.EnableSubreaper() }
