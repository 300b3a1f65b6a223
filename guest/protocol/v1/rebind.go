package protocol

import "sensorium.dev/workbench/internal/actuation"

// Re-binding a running guest to a new owner (a warm-pool member adopted by its claimer, a
// guest restored from a snapshot of another environment's boot).
//
// The operation "rebind" is sent on a channel that handshook with the guest's current
// binding, so only a host that knows the current nonce can re-bind. Its args carry the
// complete next binding. The guest accepts it only when:
//
//   - the next binding is well-formed (Binding.Validate);
//   - the guest CID and the image digest are unchanged (the same VM, the same image);
//   - the source generation is strictly greater than the current one;
//   - the nonce is fresh: different from the current one.
//
// On success, before answering, the guest kills every process and PTY session, drops every
// patch stage, clears quiesce, and replaces its binding (persisted in its state directory,
// so an agent restarted by the guest init keeps the new binding and never falls back to
// the boot input's). Every other open channel is superseded: its next request is refused
// with nonce-mismatch in an error frame and the connection closed. The answering channel
// is closed after the result. From then on only a handshake with the next binding
// succeeds; the previous nonce is refused like any stale nonce.

// RebindArgs are the args of the rebind operation.
type RebindArgs struct {
	Binding Binding `json:"binding"`
}

// Validate checks the next binding's own form.
func (a *RebindArgs) Validate() error { return a.Binding.Validate() }

// RebindData answers rebind: what the guest cleared, and its (unchanged) boot id.
type RebindData struct {
	BootID           string `json:"bootID"`
	SessionsClosed   uint32 `json:"sessionsClosed"`
	ProcessesKilled  uint32 `json:"processesKilled"`
	StagesDropped    uint32 `json:"stagesDropped"`
	ChannelsReplaced uint32 `json:"channelsReplaced"`
}

// CheckRebind reports whether the guest bound to b may be re-bound to next. Both sides
// apply it: the host before sending, the guest before acting.
func (b *Binding) CheckRebind(next *Binding) error {
	if err := next.Validate(); err != nil {
		return err
	}
	switch {
	case next.GuestCID != b.GuestCID:
		return actuation.Refusef(actuation.CodeCIDMismatch, "rebind to CID %d, this guest is CID %d", next.GuestCID, b.GuestCID)
	case next.ImageDigest != b.ImageDigest:
		return actuation.Refusef(actuation.CodeImageDigestMismatch, "rebind names another image than this boot's")
	case next.SourceGeneration <= b.SourceGeneration:
		return actuation.Refusef(actuation.CodeGenerationMismatch, "rebind to generation %d, not above the current %d", next.SourceGeneration, b.SourceGeneration)
	case next.BootNonce == b.BootNonce:
		return actuation.Refusef(actuation.CodeNonceMismatch, "rebind must carry a fresh nonce")
	}
	return nil
}
