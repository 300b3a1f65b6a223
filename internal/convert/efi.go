package convert

import (
	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/backends"
)

// EFIVariant picks the ImageManifest variant an EFI-booting backend (vfkit-system.v1) boots
// for arch: bootMode efi, that backend, that architecture, with a disk. The disk format is
// raw: the manifest's disk is a raw image (the only format vfkit-system.v1 attaches), and
// the backend re-checks the format and the digest before it clones anything. nil when the
// manifest has no such variant.
func EFIVariant(spec *wbv1.ImageManifestSpec, backend wbv1.BackendID, arch wbv1.Architecture) *backends.EFIBootImage {
	for _, v := range spec.Variants {
		if v.BackendID != backend || v.Architecture != arch || v.BootMode != wbv1.BootModeEFI || v.Disk == nil {
			continue
		}
		return &backends.EFIBootImage{Variant: v.Name, Architecture: string(v.Architecture), DiskPath: string(v.Disk.Path),
			DiskDigest: string(v.Disk.Digest), DiskFormat: "raw"}
	}
	return nil
}
