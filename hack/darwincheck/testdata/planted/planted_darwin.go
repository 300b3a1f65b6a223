//go:build darwin

// Package planted misuses the vz API (a planted type error only a darwin type-check
// against the real vz module can see: the file does not exist for Linux builds).
package planted

import "github.com/Code-Hex/vz/v3"

// RNG passes one device where vz takes a slice.
func RNG(cfg *vz.VirtualMachineConfiguration) error {
	rng, err := vz.NewVirtioEntropyDeviceConfiguration()
	if err != nil {
		return err
	}
	cfg.SetEntropyDevicesVirtualMachineConfiguration(rng)
	return nil
}
