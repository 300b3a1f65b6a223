//go:build !linux

package backends

import (
	"context"

	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// MaterializeFunc fills an empty directory beneath an fsaccess root, as on Linux
// (materialize_linux.go). On the darwin node of vfkit-system.v1 a sourced root is refused
// before any backend sees it; the type is the same so the node agent compiles there.
type MaterializeFunc func(ctx context.Context, staging *fsaccess.Root, stagingDir string) (files, dirs int, bytes int64, err error)
