//go:build !linux

package fixturecopy

import "sensorium.dev/workbench/internal/actuation"

// pinSource refuses off Linux: pinning the admitted source directory needs O_PATH
// and /proc/self/fd, so fixture-copy.v1 cannot copy a source there (and the node
// agent does not offer it).
func pinSource(p plannedRoot) (string, func(), error) {
	return "", nil, actuation.Refusef(actuation.CodeBackendNotOffered, "source %q: fixture-copy.v1 pins its source with O_PATH and /proc, which only Linux has", p.source)
}
