//go:build linux

package agent

import "golang.org/x/sys/unix"

// hostMemBytes is the machine's RAM (sysinfo(2)); 0 when unknown.
func hostMemBytes() uint64 {
	var si unix.Sysinfo_t
	var mem uint64
	if unix.Sysinfo(&si) == nil {
		mem = uint64(si.Totalram) * uint64(si.Unit)
	}
	return mem
}
