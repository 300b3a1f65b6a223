package convert

import (
	"testing"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

func TestEFIVariant(t *testing.T) {
	disk := &wbv1.ImageFile{Path: "guest/full-arm64.raw", Digest: "sha256:00"}
	spec := &wbv1.ImageManifestSpec{Variants: []wbv1.ImageVariant{
		{Name: "minimal", BackendID: wbv1.BackendQEMUMicroVM, Architecture: wbv1.ArchitectureX8664, BootMode: wbv1.BootModeDirectKernel, Disk: disk},
		{Name: "efi-x86", BackendID: wbv1.BackendVfkit, Architecture: wbv1.ArchitectureX8664, BootMode: wbv1.BootModeEFI, Disk: disk},
		{Name: "efi-nodisk", BackendID: wbv1.BackendVfkit, Architecture: wbv1.ArchitectureARM64, BootMode: wbv1.BootModeEFI},
		{Name: "direct-arm", BackendID: wbv1.BackendVfkit, Architecture: wbv1.ArchitectureARM64, BootMode: wbv1.BootModeDirectKernel, Disk: disk},
		{Name: "full-system-arm64", BackendID: wbv1.BackendVfkit, Architecture: wbv1.ArchitectureARM64, BootMode: wbv1.BootModeEFI, Disk: disk},
	}}
	got := EFIVariant(spec, wbv1.BackendVfkit, wbv1.ArchitectureARM64)
	if got == nil || got.Variant != "full-system-arm64" || got.DiskPath != "guest/full-arm64.raw" || got.DiskFormat != "raw" || got.Architecture != "arm64" {
		t.Fatalf("EFIVariant = %+v", got)
	}
	spec.Variants = spec.Variants[:4]
	if got := EFIVariant(spec, wbv1.BackendVfkit, wbv1.ArchitectureARM64); got != nil {
		t.Fatalf("EFIVariant picked %+v from variants that are not an arm64 EFI disk", got)
	}
}
