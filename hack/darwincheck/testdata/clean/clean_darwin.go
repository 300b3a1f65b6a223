//go:build darwin

// Package clean uses the vz API correctly: darwincheck reports no error in it.
package clean

import "github.com/Code-Hex/vz/v3"

// RNG configures an entropy device.
func RNG(cfg *vz.VirtualMachineConfiguration) error {
	rng, err := vz.NewVirtioEntropyDeviceConfiguration()
	if err != nil {
		return err
	}
	cfg.SetEntropyDevicesVirtualMachineConfiguration([]*vz.VirtioEntropyDeviceConfiguration{rng})
	return nil
}
