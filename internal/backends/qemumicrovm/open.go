package qemumicrovm

import (
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/guestenv"
)

// Open returns the guest Env of environment id: its commands, PTY programs and roots live
// in the VM's guest, reached through this backend's broker (Guest, GuestChannel).
func (b *Backend) Open(id string) (backends.Env, error) { return guestenv.Open(b, id), nil }
