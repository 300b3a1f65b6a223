//go:build darwin

// Package nodeplanted carries one planted darwin-only type error in node code: the
// Linux assumption that st.Dev is a uint64 (it is an int32 on darwin). It builds on
// Linux; only darwincheck can see it.
package nodeplanted

import (
	"golang.org/x/sys/unix"

	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// Dev returns the device of the root's directory.
func Dev(r *fsaccess.Root) (uint64, error) {
	var st unix.Stat_t
	if err := unix.Fstat(r.FD(), &st); err != nil {
		return 0, err
	}
	return st.Dev, nil // planted
}
