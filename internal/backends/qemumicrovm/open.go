package qemumicrovm

import (
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/guestenv"
)

// Open returns the guest Env of environment id: its commands, PTY programs and roots live
// in the VM's guest, reached through this backend's broker (Guest, GuestChannel).
func (b *Backend) Open(id string) (backends.Env, error) { return guestenv.Open(b, id), nil }

// MaterializesSources: a sourced root is filled into the working disk of a full-system
// variant (sources.go); a variant without a disk refuses it at Allocate.
func (b *Backend) MaterializesSources() bool { return true }
