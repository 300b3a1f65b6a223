package guestclient

import (
	"context"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
)

// Rebind re-binds the guest this channel handshook with to next (guest/protocol/v1
// rebind.go): the same CID and image, a greater generation, a fresh nonce. The guest
// clears every process, session and stage of the previous owner and closes this channel;
// the Client is closed on return whatever the outcome of a sent request. Only a handshake
// with next reaches the guest afterwards. A lost answer is an *UnknownError: the caller
// then tries both bindings (the new one first).
func (c *Client) Rebind(ctx context.Context, opID string, next protocol.Binding) (protocol.RebindData, error) {
	var d protocol.RebindData
	if err := c.binding.CheckRebind(&next); err != nil {
		return d, marked(err)
	}
	defer func() { _ = c.Close() }()
	res, _, err := c.do(ctx, call{op: protocol.OpRebind, opID: opID, args: protocol.RebindArgs{Binding: next}})
	if err != nil {
		return d, err
	}
	if err := c.data(res, &d); err != nil {
		return d, err
	}
	if d.BootID != c.ack.BootID {
		return d, c.violation(protocol.OpRebind, "answered boot id %q, the channel's is %q", protocol.Truncate(d.BootID), c.ack.BootID)
	}
	return d, nil
}
