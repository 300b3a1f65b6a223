package procexec

import "time"

// The spec of one sandbox is the same on every platform (on darwin every entry point
// that would start one refuses: sandbox_darwin.go).

// SandboxSpec is what runs inside one sandbox. Paths are host paths; roots
// appear at the same paths inside, TempDir appears as /tmp.
type SandboxSpec struct {
	Argv []string
	Env  []string
	// Dir is the working directory: under a root, the temp dir, or any other
	// existing directory (then bound read-only).
	Dir           string
	WritableRoots []string
	ReadableRoots []string
	// TempDir is the private temp dir (created by the caller, writable).
	TempDir string
	// TTY is the host path of the program's terminal (/dev/pts/N), bound at
	// the same path so the program can name it (ttyname). No other terminal
	// is visible and none can be allocated (no /dev/ptmx).
	TTY string
	// Mounts attach host paths (directories or regular files) at other paths
	// inside, after the roots (so a mount may cover part of a root): e.g. a
	// size-capped scratch filesystem at an action's write root, or a pinned
	// copy of a script at its declared path. Writable directories get Landlock
	// write rights.
	Mounts []Mount
	// FileSizeLimit, when > 0, is the program's RLIMIT_FSIZE (bytes) with
	// SIGXFSZ ignored: a write that would grow any file past it fails with
	// EFBIG at the limit instead of killing the program.
	FileSizeLimit int64
	// KillAfter, when > 0, is the sandbox's own deadline, counted from its program's
	// start: its PID 1 kills every process in it then, whether or not the parent is
	// still alive (a killed agent leaves no program running past its deadline).
	KillAfter time.Duration
	// GitMetadataWritable leaves repository metadata under the writable roots writable
	// (CommandProfile gitMetadata: Writable); by default it is read-only (gitmeta.go).
	GitMetadataWritable bool
	// TempBytes bounds the sandbox's /tmp (0: DefaultTempBytes; tmpbound.go).
	TempBytes int64
}

// Mount is one host path attached inside a sandbox at Target (idmapped like
// the roots: host uid/gid 0 appear as the sandbox's root).
type Mount struct {
	Source   string // host path: an existing directory or regular file
	Target   string // clean absolute path inside the sandbox, not a system path
	Writable bool   // directories only
}

// MaxMounts bounds SandboxSpec.Mounts (refusal.InvalidSpec).
const MaxMounts = 8
