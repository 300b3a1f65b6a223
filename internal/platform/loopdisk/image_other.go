//go:build !linux

package loopdisk

// MountImage refuses off Linux (no loop devices).
func MountImage(string, string) error { return errNoLoop() }

// UnmountNow refuses off Linux (no loop devices).
func UnmountNow(string) error { return errNoLoop() }
