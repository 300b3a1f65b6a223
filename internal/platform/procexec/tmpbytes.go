package procexec

// Bounds of a sandbox's /tmp (a tmpfs of its own on Linux: tmpbound_linux.go).
const (
	// DefaultTempBytes is the /tmp of a sandbox whose caller sets no bound.
	DefaultTempBytes = 256 << 20
	// MinTempBytes and MaxTempBytes bound a configured /tmp.
	MinTempBytes = 1 << 20
	MaxTempBytes = 64 << 30
)
