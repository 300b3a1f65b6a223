package backends

// EFIBootImage is one EFI variant of an ImageManifest (bootMode efi): a raw disk image
// whose own EFI system partition boots the guest, the distribution kernel and initramfs
// inside it. Paths are relative to the backend's image directory (the node operator's
// configuration), never host paths chosen by a caller. The backend verifies the digest
// before it clones the disk for an environment.
type EFIBootImage struct {
	// Variant is the ImageManifest variant's name (for messages and the recovery record).
	Variant string
	// Architecture is the guest architecture of the variant (x86_64 or arm64).
	Architecture string
	// DiskPath is the pinned, immutable raw base disk; DiskDigest its sha256:<hex>.
	DiskPath   string
	DiskDigest string
	// DiskFormat is explicit ("raw"): a backend never autodetects a format.
	DiskFormat string
}
