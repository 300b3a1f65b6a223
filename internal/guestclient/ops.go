package guestclient

import (
	"context"
	"fmt"
	"io"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
)

// Every method validates its arguments with the protocol's own rules before sending (a
// local refusal carries the same code the guest would answer), and validates the answer
// against the request. opID "" lets the client choose one ("op-<seq>").

// SpawnResult is a finished process: its status and its output, split.
type SpawnResult struct {
	protocol.SpawnData
	Stdout, Stderr []byte
}

// Spawn runs a process to completion (or its timeout, at most the request deadline).
// opID names the running process for Signal from another Client.
func (c *Client) Spawn(ctx context.Context, opID string, args protocol.SpawnArgs) (*SpawnResult, error) {
	deadline, ms, err := requestDeadline(ctx)
	if err != nil {
		return nil, fmt.Errorf("spawn: %w", err)
	}
	if err := args.Validate(ms); err != nil {
		return nil, marked(err)
	}
	res, bulk, err := c.do(ctx, call{op: protocol.OpSpawn, opID: opID, args: args, bulkLimit: uint64(max(args.OutputMax, 1)), deadline: deadline, ms: ms})
	if err != nil {
		return nil, err
	}
	var d protocol.SpawnData
	if err := c.data(res, &d); err != nil {
		return nil, err
	}
	if uint64(d.StdoutBytes)+uint64(d.StderrBytes) != uint64(len(bulk)) || uint64(len(bulk)) > uint64(args.OutputMax) {
		return nil, c.violation(protocol.OpSpawn, "output %d+%d bytes, bulk %d, budget %d", d.StdoutBytes, d.StderrBytes, len(bulk), args.OutputMax)
	}
	if d.Signal != "" && !validSignalName(d.Signal) {
		return nil, c.violation(protocol.OpSpawn, "signal name %q", protocol.Truncate(d.Signal))
	}
	return &SpawnResult{SpawnData: d, Stdout: bulk[:d.StdoutBytes], Stderr: bulk[d.StdoutBytes:]}, nil
}

func validSignalName(s string) bool {
	if len(s) > 16 {
		return false
	}
	for i := 0; i < len(s); i++ {
		if !(s[i] >= 'A' && s[i] <= 'Z' || s[i] >= '0' && s[i] <= '9') {
			return false
		}
	}
	return true
}

// PTYOpen starts a process on a new terminal.
func (c *Client) PTYOpen(ctx context.Context, opID string, args protocol.PTYOpenArgs) (protocol.PTYOpenData, error) {
	var d protocol.PTYOpenData
	if err := args.Validate(); err != nil {
		return d, marked(err)
	}
	res, _, err := c.do(ctx, call{op: protocol.OpPTYOpen, opID: opID, args: args})
	if err != nil {
		return d, err
	}
	if err := c.data(res, &d); err != nil {
		return d, err
	}
	if d.SessionID != args.SessionID {
		return d, c.violation(protocol.OpPTYOpen, "answered session %q", protocol.Truncate(d.SessionID))
	}
	return d, nil
}

// PTYRead reads the session's output from args.Offset, waiting up to args.WaitMS.
func (c *Client) PTYRead(ctx context.Context, opID string, args protocol.PTYReadArgs) (protocol.PTYReadData, []byte, error) {
	var d protocol.PTYReadData
	if err := args.Validate(); err != nil {
		return d, nil, marked(err)
	}
	res, bulk, err := c.do(ctx, call{op: protocol.OpPTYRead, opID: opID, args: args, bulkLimit: uint64(args.Max)})
	if err != nil {
		return d, nil, err
	}
	if err := c.data(res, &d); err != nil {
		return d, nil, err
	}
	if d.Offset < args.Offset || d.Offset-args.Offset != d.Dropped || d.Next < d.Offset || d.Next-d.Offset != uint64(len(bulk)) {
		return d, nil, c.violation(protocol.OpPTYRead, "offsets %d..%d (dropped %d) for %d bytes from %d", d.Offset, d.Next, d.Dropped, len(bulk), args.Offset)
	}
	return d, bulk, nil
}

// PTYInput writes bytes to the session's terminal.
func (c *Client) PTYInput(ctx context.Context, opID, sessionID string, data []byte) (protocol.PTYInputData, error) {
	args := protocol.PTYInputArgs{SessionID: sessionID, Data: data}
	var d protocol.PTYInputData
	if err := args.Validate(); err != nil {
		return d, marked(err)
	}
	res, _, err := c.do(ctx, call{op: protocol.OpPTYInput, opID: opID, args: args})
	if err != nil {
		return d, err
	}
	if err := c.data(res, &d); err != nil {
		return d, err
	}
	if int(d.Written) != len(data) {
		return d, c.violation(protocol.OpPTYInput, "succeeded with %d of %d bytes", d.Written, len(data))
	}
	return d, nil
}

// PTYResize sets the terminal size.
func (c *Client) PTYResize(ctx context.Context, opID, sessionID string, rows, cols uint16) error {
	args := protocol.PTYResizeArgs{SessionID: sessionID, Rows: rows, Cols: cols}
	if err := args.Validate(); err != nil {
		return marked(err)
	}
	_, _, err := c.do(ctx, call{op: protocol.OpPTYResize, opID: opID, args: args})
	return err
}

// PTYClose kills the session's process group and releases it.
func (c *Client) PTYClose(ctx context.Context, opID, sessionID string) error {
	args := protocol.SessionArgs{SessionID: sessionID}
	if err := args.Validate(); err != nil {
		return marked(err)
	}
	_, _, err := c.do(ctx, call{op: protocol.OpPTYClose, opID: opID, args: args})
	return err
}

// Signal signals a session or a running spawn (by its opID).
func (c *Client) Signal(ctx context.Context, opID, target, signal string) error {
	args := protocol.SignalArgs{Target: target, Signal: signal}
	if err := args.Validate(); err != nil {
		return marked(err)
	}
	_, _, err := c.do(ctx, call{op: protocol.OpSignal, opID: opID, args: args})
	return err
}

// SnapshotResult is a validated listing.
type SnapshotResult struct {
	protocol.SnapshotData
	Entries []protocol.Entry
}

// Snapshot lists a subtree beneath the guest root. The listing is decoded while it
// arrives, one bounded entry at a time, and counted as it is decoded: a guest that lists
// more entries than asked for, or an entry above MaxEntryJSON, is refused
// (answer-over-bound) at that entry, never after decoding the whole transfer; the
// transfer itself is bounded by what args.MaxEntries entries can take.
func (c *Client) Snapshot(ctx context.Context, opID string, args protocol.SnapshotArgs) (*SnapshotResult, error) {
	if err := args.Validate(); err != nil {
		return nil, marked(err)
	}
	pr, pw := io.Pipe()
	type decoded struct {
		entries []protocol.Entry
		err     error
	}
	done := make(chan decoded, 1)
	go func() {
		entries, err := decodeEntries(pr, args.MaxEntries)
		if err != nil {
			// The next chunk's write fails with err: the transfer stops there.
			_ = pr.CloseWithError(err)
		} else {
			_ = pr.Close()
		}
		done <- decoded{entries, err}
	}()
	bulkLimit := min(uint64(args.MaxEntries)*(MaxEntryJSON+1)+2, protocol.MaxTransfer)
	res, _, err := c.do(ctx, call{op: protocol.OpFileSnapshot, opID: opID, args: args, bulkLimit: bulkLimit, sink: pw})
	if err != nil {
		_ = pw.CloseWithError(err)
	} else {
		_ = pw.Close()
	}
	dec := <-done
	if err != nil {
		return nil, err
	}
	var d protocol.SnapshotData
	if err := c.data(res, &d); err != nil {
		return nil, err
	}
	if dec.err != nil {
		c.mu.Lock()
		defer c.mu.Unlock()
		return nil, c.breakWith(fmt.Errorf("%w: %s listing: %w", ErrProtocol, protocol.OpFileSnapshot, dec.err))
	}
	entries := dec.entries
	if uint32(len(entries)) != d.Entries || d.Entries > args.MaxEntries {
		return nil, c.violation(protocol.OpFileSnapshot, "%d entries listed, %d declared, %d allowed", len(entries), d.Entries, args.MaxEntries)
	}
	for _, e := range entries {
		if protocol.CheckPath(e.Path, false) != nil || (e.Digest != "" && !protocol.ValidDigest(e.Digest)) || len(e.Link) > protocol.MaxPathLen {
			return nil, c.violation(protocol.OpFileSnapshot, "malformed entry %q", protocol.Truncate(e.Path))
		}
		switch e.Type {
		case "file", "dir", "symlink", "other":
		default:
			return nil, c.violation(protocol.OpFileSnapshot, "entry type %q", protocol.Truncate(e.Type))
		}
	}
	return &SnapshotResult{SnapshotData: d, Entries: entries}, nil
}

// ReadFile reads at most args.Max bytes of a regular file beneath the guest root.
func (c *Client) ReadFile(ctx context.Context, opID string, args protocol.ReadArgs) (protocol.ReadData, []byte, error) {
	var d protocol.ReadData
	if err := args.Validate(); err != nil {
		return d, nil, marked(err)
	}
	res, bulk, err := c.do(ctx, call{op: protocol.OpFileRead, opID: opID, args: args, bulkLimit: args.Max})
	if err != nil {
		return d, nil, err
	}
	if err := c.data(res, &d); err != nil {
		return d, nil, err
	}
	if d.Offset != int64(args.Offset) || d.Size < 0 || uint64(len(bulk)) > args.Max || (d.EOF != (d.Offset+int64(len(bulk)) >= d.Size)) {
		return d, nil, c.violation(protocol.OpFileRead, "offset %d size %d eof %v for %d bytes", d.Offset, d.Size, d.EOF, len(bulk))
	}
	return d, bulk, nil
}

// StagePatch uploads content for target and returns the content-bound stage ref, which
// the host computes itself and compares. An exact replay (after a lost receipt) returns
// the same ref.
func (c *Client) StagePatch(ctx context.Context, opID, target string, content []byte) (protocol.StageData, error) {
	args := protocol.StageArgs{Target: target, Content: protocol.Bulk{Bytes: uint64(len(content)), Digest: protocol.DigestOf(content)}}
	var d protocol.StageData
	if err := args.Validate(); err != nil {
		return d, marked(err)
	}
	if content == nil {
		content = []byte{}
	}
	res, _, err := c.do(ctx, call{op: protocol.OpPatchStage, opID: opID, args: args, upload: content})
	if err != nil {
		return d, err
	}
	if err := c.data(res, &d); err != nil {
		return d, err
	}
	if want := protocol.StageRef(target, args.Content.Bytes, args.Content.Digest); d.Ref != want {
		return d, c.violation(protocol.OpPatchStage, "stage ref %q, want %s", protocol.Truncate(d.Ref), want)
	}
	if d.Stages > protocol.MaxStages || d.StageBytes > protocol.MaxStageBytes {
		return d, c.violation(protocol.OpPatchStage, "stage usage %d stages / %d bytes beyond the caps", d.Stages, d.StageBytes)
	}
	return d, nil
}

// ApplyPatch replaces target with a staged content if target's content matches base.
func (c *Client) ApplyPatch(ctx context.Context, opID string, args protocol.ApplyArgs) (protocol.ApplyData, error) {
	var d protocol.ApplyData
	if err := args.Validate(); err != nil {
		return d, marked(err)
	}
	res, _, err := c.do(ctx, call{op: protocol.OpPatchApply, opID: opID, args: args})
	if err != nil {
		return d, err
	}
	if err := c.data(res, &d); err != nil {
		return d, err
	}
	if protocol.StageRef(args.Target, d.Bytes, d.Digest) != args.Ref {
		return d, c.violation(protocol.OpPatchApply, "applied content %s (%d bytes) is not stage %s", protocol.Truncate(d.Digest), d.Bytes, args.Ref)
	}
	return d, nil
}

// Export returns a tar archive of a subtree beneath the guest root.
func (c *Client) Export(ctx context.Context, opID string, args protocol.ExportArgs) (protocol.ExportData, []byte, error) {
	var d protocol.ExportData
	if err := args.Validate(); err != nil {
		return d, nil, marked(err)
	}
	res, bulk, err := c.do(ctx, call{op: protocol.OpExport, opID: opID, args: args, bulkLimit: args.MaxBytes})
	if err != nil {
		return d, nil, err
	}
	if err := c.data(res, &d); err != nil {
		return d, nil, err
	}
	if d.Entries > args.MaxEntries {
		return d, nil, c.violation(protocol.OpExport, "%d entries, %d allowed", d.Entries, args.MaxEntries)
	}
	return d, bulk, nil
}

// Inspect observes the guest (every field untrusted).
func (c *Client) Inspect(ctx context.Context, opID string) (protocol.InspectData, error) {
	var d protocol.InspectData
	res, _, err := c.do(ctx, call{op: protocol.OpInspect, opID: opID, args: protocol.Empty{}})
	if err != nil {
		return d, err
	}
	if err := c.data(res, &d); err != nil {
		return d, err
	}
	if len(d.NetInterfaces) > 64 {
		return d, c.violation(protocol.OpInspect, "%d interfaces", len(d.NetInterfaces))
	}
	return d, nil
}

// Quiesce stops the guest from starting processes or sessions (monotonic).
func (c *Client) Quiesce(ctx context.Context, opID string) (protocol.QuiesceData, error) {
	var d protocol.QuiesceData
	res, _, err := c.do(ctx, call{op: protocol.OpQuiesce, opID: opID, args: protocol.Empty{}})
	if err != nil {
		return d, err
	}
	return d, c.data(res, &d)
}

// Shutdown asks the guest to end everything and power off. A lost answer is an unknown
// outcome; the backend observes the VMM's exit either way.
func (c *Client) Shutdown(ctx context.Context, opID string) error {
	_, _, err := c.do(ctx, call{op: protocol.OpShutdown, opID: opID, args: protocol.Empty{}})
	return err
}
