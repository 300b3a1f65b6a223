package v1alpha1

// EnvironmentRecordingLimits are the operator's caps on the workspace state hash of one
// environment (seed 004's state_hash_before/state_hash_after per edge). The node re-hashes
// only files whose (device, inode, size, mtime, ctime) changed since the previous edge, so
// the per-edge cost follows the change, not the tree; these caps bound the tree itself.
// A tree over a cap is refused with state-tree-too-large (the recording stops, a replay
// halts), never hashed partially. The defaults and ceilings are treehash's
// (docs/skills.md, "Recording real repositories").
type EnvironmentRecordingLimits struct {
	// maxEntries caps files, directories and links across all roots (default 65,536).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1000000
	MaxEntries *int32 `json:"maxEntries,omitempty"`

	// maxBytes caps the total size of regular files across all roots (default 1 GiB).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=68719476736
	MaxBytes *int64 `json:"maxBytes,omitempty"`

	// maxFileBytes caps one regular file (default 64 MiB).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=4294967296
	MaxFileBytes *int64 `json:"maxFileBytes,omitempty"`
}
