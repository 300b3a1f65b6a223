// Package protocol is version 1 of the Workbench guest protocol: the wire contract between
// the host (internal/guestclient, driven by the node agent's host broker) and the guest
// agent (guest/agent) over one virtio-vsock stream. It imports neither Kubernetes nor the
// project's API types, so the guest binary stays small and the contract can be reviewed
// on its own.
//
// # Frames
//
// A stream is a sequence of frames. Every frame is a fixed 64-byte header followed by
// Length payload bytes. All integers are big-endian.
//
//	offset size field
//	0      4    magic "WBGP"
//	4      2    version (1)
//	6      1    type: 1 handshake, 2 request, 3 chunk, 4 result, 5 error
//	7      1    flags (reserved, must be 0)
//	8      8    sequence
//	16     4    deadline in milliseconds (handshake and request only; 0 otherwise)
//	20     4    payload length (<= MaxPayload)
//	24     4    chunk index (chunk frames only; 0 otherwise)
//	28     4    chunk count (request/result: chunks that follow; chunk: the same count)
//	32     32   SHA-256 of the payload
//
// The header is validated completely (magic, version, type, flags, length, counts,
// deadline range, per-type rules) before a single payload byte is allocated or read, and
// the payload's SHA-256 must equal the header's digest or the frame is refused. Handshake,
// request, result and error payloads are one JSON object decoded strictly (unknown fields,
// trailing data and wrong types are refused); chunk payloads are raw bytes.
//
// # Conversation
//
//  1. The host sends a handshake frame (sequence 0) carrying the exact binding: protocol
//     version, environment ref, source generation, plan digest, image digest, guest CID
//     and the per-boot nonce. The guest compares it with the binding it read from its
//     read-only boot input and answers a result frame (sequence 0) with a per-connection
//     channel id, or an error frame and closes. No operation is dispatched before a
//     handshake succeeded.
//  2. Each request frame carries a sequence strictly greater than the previous one on that
//     connection, a deadline (milliseconds, 1..MaxDeadline) and the channel id in its
//     payload. A request that uploads content (patch.stage) declares the chunk count in
//     its header and the exact byte count and SHA-256 in its payload; the chunks follow at
//     once with the request's sequence and indexes 0..count-1.
//  3. The guest answers exactly one result frame with the request's sequence: outcome
//     succeeded, refused (with a stable code) or unknown (only for an admitted effect whose
//     outcome cannot be proved). A result with bulk data (process output, file content,
//     export archive, snapshot listing) declares byte count and SHA-256 in its payload and
//     the chunk count in its header; the chunks follow.
//  4. A violation of the framing rules (bad header, digest mismatch, oversized frame or
//     transfer, replayed sequence, malformed request, missing handshake, expired deadline
//     during an upload) is answered with an error frame and the connection is closed: the
//     stream can no longer be trusted to be in step.
//
// A guest can be re-bound to a new owner (a warm-pool member adopted by its claimer, a
// guest restored from a snapshot) by the operation "rebind" on a handshaken channel: same
// CID and image, a strictly greater generation, a fresh nonce. The guest clears every
// process, session and stage, supersedes every other channel and closes the answering one;
// only the new binding handshakes afterwards (rebind.go; golden vectors in
// test/vectors/guest/rebind.json).
//
// The guest starts a request's deadline when its header arrives and never extends it:
// uploads that trickle past it are refused and publish nothing, process timeouts may not
// exceed it, and waits are clipped to it. The host keeps its own deadline and treats an
// answer it did not receive in time as unknown.
//
// Everything the guest returns is untrusted: the host re-validates sizes, counts, digests
// and the content-bound stage refs it can compute itself.
package protocol
