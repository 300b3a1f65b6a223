//go:build darwin

package agent

import "golang.org/x/sys/unix"

// hostMemBytes is the machine's RAM (sysctl hw.memsize); 0 when unknown.
func hostMemBytes() uint64 {
	mem, err := unix.SysctlUint64("hw.memsize")
	if err != nil {
		return 0
	}
	return mem
}
