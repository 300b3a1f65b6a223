package backends

import (
	"context"

	"sensorium.dev/workbench/internal/platform/fsaccess"
)

// MaterializeFunc fills an empty directory (staging, opened beneath; stagingDir, its
// absolute path) from a workspace source and returns the files, directories and bytes
// written (internal/platform/sources does the work; the node agent binds the source).
type MaterializeFunc func(ctx context.Context, staging *fsaccess.Root, stagingDir string) (files, dirs int, bytes int64, err error)
