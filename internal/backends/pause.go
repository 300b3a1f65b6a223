package backends

import "context"

// PhasePaused: the environment's guest is stopped in place (its vCPUs do not run; memory
// and devices are kept) as its owner asked (spec.desiredState Paused).
const PhasePaused Phase = "Paused"

// Pauser is implemented by backends that can stop an environment's guest in place and
// resume it (qemu-microvm.v1: QMP stop and cont). Both are idempotent and confirm the
// state with the VMM before they return. Backends without it refuse a pause with
// pause-unsupported (docs/vm-pause-snapshot.md) and keep running.
type Pauser interface {
	// Pause stops the guest; the returned status is PhasePaused with the VMM's own
	// account of its run state in the message.
	Pause(ctx context.Context, spec Spec) (Status, error)
	// Resume lets a paused guest run again and waits until its agent answers a handshake;
	// on a running guest it changes nothing.
	Resume(ctx context.Context, spec Spec) (Status, error)
}
