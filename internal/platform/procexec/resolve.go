package procexec

import "path/filepath"

// ResolveExecutable is the program the sandbox would start for exe: its symlink-resolved
// path on the node ("" when it cannot be resolved; the start then fails on its own).
func ResolveExecutable(exe string) string {
	r, err := filepath.EvalSymlinks(exe)
	if err != nil {
		return ""
	}
	return r
}
