//go:build linux

package sandboxhelper

import "testing"

// TestLandlockConfigRefusesOldABI: below MinLandlockABI (v3, the first that confines
// truncate(2)) the helper refuses to set Landlock up rather than confine writes partly;
// from it on it picks the kernel's preset with network rights left unhandled.
func TestLandlockConfigRefusesOldABI(t *testing.T) {
	for abi := 0; abi < MinLandlockABI; abi++ {
		if _, err := landlockConfig(abi); err == nil {
			t.Errorf("landlockConfig(%d) accepted an ABI without truncate confinement", abi)
		}
	}
	for abi := MinLandlockABI; abi <= len(landlockConfigs)+2; abi++ {
		c, err := landlockConfig(abi)
		if err != nil {
			t.Errorf("landlockConfig(%d): %v", abi, err)
			continue
		}
		if c.HandledAccessNet != 0 {
			t.Errorf("landlockConfig(%d) handles network rights %v", abi, c.HandledAccessNet)
		}
	}
}
