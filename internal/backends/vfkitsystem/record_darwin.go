package vfkitsystem

import (
	"os"

	"sensorium.dev/workbench/internal/backends/vmrecord"
)

// writeFileAtomic replaces dir/name durably (vmrecord.WriteFileAtomic); the darwin backend
// writes its binding disk with it.
func writeFileAtomic(dir, name string, data []byte, mode os.FileMode) error {
	return vmrecord.WriteFileAtomic(dir, name, data, mode)
}
