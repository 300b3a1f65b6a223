//go:build darwin

package vfkitsystem

import (
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
)

// Open refuses: this backend does not yet carry commands, terminals or file access into
// its guest (no broker for the guest protocol).
func (b *Backend) Open(id string) (backends.Env, error) {
	return backends.Env{}, actuation.Refusef(actuation.CodeCapabilityMismatch, "backend %s offers no executor or file access for environment %s yet", ID, id)
}
