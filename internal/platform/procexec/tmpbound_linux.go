//go:build linux

package procexec

import (
	"fmt"

	"sensorium.dev/workbench/internal/actuation"
)

// The sandbox's /tmp is a tmpfs of its own, mounted by the helper inside the sandbox's
// mount namespace with a size the kernel enforces: a write past it fails with ENOSPC, its
// pages are charged to the command's (or session's) memory cgroup, and it is gone with the
// namespace when the sandbox ends. Nothing a sandbox writes to /tmp reaches the agent's
// state filesystem. (The host temp dir under the agent's state dir stays the sandbox's
// bookkeeping directory; nothing is mounted from it.)

const (
	// tempInodeBytes: one inode per 4 KiB of /tmp (at least minTempInodes).
	tempInodeBytes = 4 << 10
	minTempInodes  = 1024
)

// tmpMount is the /tmp mount of a sandbox bounded to size bytes (0: DefaultTempBytes).
func tmpMount(size int64) (mountSpec, error) {
	if size == 0 {
		size = DefaultTempBytes
	}
	if size < MinTempBytes || size > MaxTempBytes {
		return mountSpec{}, actuation.Refusef(actuation.CodeInvalidSpec, "sandbox /tmp of %d bytes outside [%d, %d]", size, int64(MinTempBytes), int64(MaxTempBytes))
	}
	inodes := max(size/tempInodeBytes, minTempInodes)
	return mountSpec{Kind: mountTmpfs, Target: SandboxTmp, Data: fmt.Sprintf("mode=1777,size=%d,nr_inodes=%d", size, inodes)}, nil
}
