//go:build darwin

// Package nodeclean is darwin node code done right: the device number of a stat is an
// int32 on darwin and is converted; darwincheck reports no error in it.
package nodeclean

import (
	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/platform/fsaccess"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// Dev returns the device of the root's directory.
func Dev(r *fsaccess.Root) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(r.FD(), &st); err != nil {
		return 0, err
	}
	return uint64(st.Dev), nil
}

// Start asks for a host process, which darwin refuses.
func Start() error {
	_, err := procexec.StartSandboxed(procexec.SandboxSpec{Argv: []string{"/usr/bin/true"}}, procexec.StartOptions{})
	return err
}
