//go:build !linux

package backends

import "context"

// MaterializeFunc is Linux-only: workspace sources are materialized beneath an openat2
// root (internal/platform/fsaccess), which other kernels do not offer. Elsewhere (the
// darwin node of vfkit-system.v1) a sourced root is refused before any backend sees it;
// the type exists so the backend port compiles there.
type MaterializeFunc func(ctx context.Context, staging any, stagingDir string) (files, dirs int, bytes int64, err error)
