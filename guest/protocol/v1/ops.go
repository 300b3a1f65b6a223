package protocol

import "sensorium.dev/workbench/internal/actuation"

// Operation caps (all enforced by the guest before dispatch and re-checked by the host on
// what comes back).
const (
	MaxArgs            = actuation.MaxArgv               // the core's bounds table (actuation/bounds.go)
	MaxEnv             = actuation.MaxProcessEnvVars     // the core's bounds table
	MaxOutputBytes     = actuation.MaxCommandOutputBytes // one budget for stdout+stderr
	MaxPTYInput        = 16 << 10
	MaxPTYRead         = 256 << 10
	MaxPTYDim          = 1000
	MaxStages          = 64
	MaxStageBytes      = 64 << 20 // total of all retained stages
	MaxReadBytes       = MaxTransfer
	MaxSnapshotEntries = 65536
	MaxExportEntries   = 65536
	MaxExportBytes     = MaxTransfer
)

// Signals the guest delivers (by name, to the target's process group).
var Signals = []string{"SIGINT", "SIGTERM", "SIGKILL", "SIGHUP", "SIGQUIT", "SIGCONT", "SIGSTOP", "SIGTSTP", "SIGWINCH", "SIGUSR1", "SIGUSR2"}

// ValidSignal reports whether s is one of Signals.
func ValidSignal(s string) bool {
	for _, x := range Signals {
		if x == s {
			return true
		}
	}
	return false
}

// SpawnArgs starts a process and waits for it (bounded by TimeoutMS, which may not exceed
// the request deadline). Output: one budget, OutputMax bytes, shared by stdout and stderr.
type SpawnArgs struct {
	Argv      []string `json:"argv"`
	Env       []string `json:"env,omitempty"`
	Cwd       string   `json:"cwd,omitempty"`
	TimeoutMS uint32   `json:"timeoutMS"`
	OutputMax uint32   `json:"outputMax"`
}

// Validate checks the arguments against the caps and the request deadline.
func (a *SpawnArgs) Validate(deadlineMS uint32) error {
	if err := checkArgvEnv(a.Argv, a.Env); err != nil {
		return err
	}
	if err := CheckPath(a.Cwd, true); err != nil {
		return err
	}
	if a.TimeoutMS == 0 {
		return actuation.Refusef(actuation.CodeInvalidSpec, "timeoutMS must be > 0")
	}
	if a.TimeoutMS > deadlineMS {
		return actuation.Refusef(actuation.CodeTimeoutAboveDeadline, "timeout %d ms exceeds the request deadline %d ms", a.TimeoutMS, deadlineMS)
	}
	if a.OutputMax > MaxOutputBytes {
		return actuation.Refusef(actuation.CodeOutputCapAboveMax, "outputMax %d exceeds %d", a.OutputMax, MaxOutputBytes)
	}
	return nil
}

// SpawnData is the data of a spawn result; the bulk is stdout followed by stderr.
type SpawnData struct {
	Pid         int    `json:"pid"`
	ExitCode    int    `json:"exitCode"`
	Signal      string `json:"signal,omitempty"`
	TimedOut    bool   `json:"timedOut,omitempty"`
	Truncated   bool   `json:"truncated,omitempty"`
	StdoutBytes uint32 `json:"stdoutBytes"`
	StderrBytes uint32 `json:"stderrBytes"`
	DurationMS  uint64 `json:"durationMS"`
}

// PTYOpenArgs starts a process on a new pseudo-terminal.
type PTYOpenArgs struct {
	SessionID string   `json:"sessionID"`
	Argv      []string `json:"argv"`
	Env       []string `json:"env,omitempty"`
	Cwd       string   `json:"cwd,omitempty"`
	Rows      uint16   `json:"rows"`
	Cols      uint16   `json:"cols"`
}

// Validate checks the arguments.
func (a *PTYOpenArgs) Validate() error {
	if !ValidID(a.SessionID) {
		return actuation.Refusef(actuation.CodeInvalidSpec, "session id must be 1..%d of [A-Za-z0-9._-]", MaxIDLen)
	}
	if err := checkArgvEnv(a.Argv, a.Env); err != nil {
		return err
	}
	if err := CheckPath(a.Cwd, true); err != nil {
		return err
	}
	return checkDims(a.Rows, a.Cols)
}

func checkDims(rows, cols uint16) error {
	if rows == 0 || cols == 0 || rows > MaxPTYDim || cols > MaxPTYDim {
		return actuation.Refusef(actuation.CodeInvalidSpec, "rows and cols must be 1..%d", MaxPTYDim)
	}
	return nil
}

// PTYOpenData answers pty.open.
type PTYOpenData struct {
	SessionID string `json:"sessionID"`
	Pid       int    `json:"pid"`
}

// PTYReadArgs reads output from Offset (a byte position in the session's output stream),
// waiting up to WaitMS (clipped to the request deadline) for data to arrive.
type PTYReadArgs struct {
	SessionID string `json:"sessionID"`
	Offset    uint64 `json:"offset"`
	Max       uint32 `json:"max"`
	WaitMS    uint32 `json:"waitMS,omitempty"`
}

// Validate checks the arguments.
func (a *PTYReadArgs) Validate() error {
	if !ValidID(a.SessionID) {
		return actuation.Refusef(actuation.CodeInvalidSpec, "invalid session id")
	}
	if a.Max == 0 || a.Max > MaxPTYRead {
		return actuation.Refusef(actuation.CodeInvalidSpec, "max must be 1..%d", MaxPTYRead)
	}
	return nil
}

// PTYReadData answers pty.read; the bulk is the output from Offset to Next. Dropped is
// how many bytes before Offset the bounded buffer no longer holds (when the requested
// offset was older than the buffer).
type PTYReadData struct {
	Offset   uint64 `json:"offset"`
	Next     uint64 `json:"next"`
	Dropped  uint64 `json:"dropped,omitempty"`
	Exited   bool   `json:"exited,omitempty"`
	ExitCode int    `json:"exitCode,omitempty"`
	Signal   string `json:"signal,omitempty"`
}

// PTYInputArgs writes bytes to the session's terminal.
type PTYInputArgs struct {
	SessionID string `json:"sessionID"`
	Data      []byte `json:"data"`
}

// Validate checks the arguments.
func (a *PTYInputArgs) Validate() error {
	if !ValidID(a.SessionID) {
		return actuation.Refusef(actuation.CodeInvalidSpec, "invalid session id")
	}
	if len(a.Data) == 0 || len(a.Data) > MaxPTYInput {
		return actuation.Refusef(actuation.CodeInvalidSpec, "input must be 1..%d bytes", MaxPTYInput)
	}
	return nil
}

// PTYInputData answers pty.input. An unknown outcome (deadline hit mid-write) says how
// many bytes were written.
type PTYInputData struct {
	Written uint32 `json:"written"`
}

// PTYResizeArgs sets the terminal size (TIOCSWINSZ).
type PTYResizeArgs struct {
	SessionID string `json:"sessionID"`
	Rows      uint16 `json:"rows"`
	Cols      uint16 `json:"cols"`
}

// Validate checks the arguments.
func (a *PTYResizeArgs) Validate() error {
	if !ValidID(a.SessionID) {
		return actuation.Refusef(actuation.CodeInvalidSpec, "invalid session id")
	}
	return checkDims(a.Rows, a.Cols)
}

// SessionArgs names one session (pty.close).
type SessionArgs struct {
	SessionID string `json:"sessionID"`
}

// Validate checks the arguments.
func (a *SessionArgs) Validate() error {
	if !ValidID(a.SessionID) {
		return actuation.Refusef(actuation.CodeInvalidSpec, "invalid session id")
	}
	return nil
}

// SignalArgs signals a PTY session or a running spawn (by its opID) — the whole process
// group.
type SignalArgs struct {
	Target string `json:"target"`
	Signal string `json:"signal"`
}

// Validate checks the arguments.
func (a *SignalArgs) Validate() error {
	if !ValidID(a.Target) {
		return actuation.Refusef(actuation.CodeInvalidSpec, "invalid target id")
	}
	if !ValidSignal(a.Signal) {
		return actuation.Refusef(actuation.CodeInvalidSpec, "signal %q is not one of %v", Truncate(a.Signal), Signals)
	}
	return nil
}

// SnapshotArgs lists a subtree beneath the root, hashing regular files up to HashMax
// bytes each.
type SnapshotArgs struct {
	Path       string `json:"path,omitempty"`
	MaxEntries uint32 `json:"maxEntries"`
	HashMax    uint64 `json:"hashMax,omitempty"`
}

// Validate checks the arguments.
func (a *SnapshotArgs) Validate() error {
	if err := CheckPath(a.Path, true); err != nil {
		return err
	}
	if a.MaxEntries == 0 || a.MaxEntries > MaxSnapshotEntries {
		return actuation.Refusef(actuation.CodeInvalidSpec, "maxEntries must be 1..%d", MaxSnapshotEntries)
	}
	if a.HashMax > MaxTransfer {
		return actuation.Refusef(actuation.CodeInvalidSpec, "hashMax exceeds %d", MaxTransfer)
	}
	return nil
}

// Entry is one snapshot entry. Symlinks are described, never followed.
type Entry struct {
	Path   string `json:"path"`
	Type   string `json:"type"` // file, dir, symlink, other
	Size   int64  `json:"size"`
	Mode   uint32 `json:"mode"`
	MTime  int64  `json:"mtime"` // unix nanoseconds
	Digest string `json:"digest,omitempty"`
	Link   string `json:"link,omitempty"`
}

// SnapshotData answers file.snapshot; the bulk is a JSON array of Entry.
type SnapshotData struct {
	Entries   uint32 `json:"entries"`
	Truncated bool   `json:"truncated,omitempty"`
}

// ReadArgs reads at most Max bytes of a regular file from Offset.
type ReadArgs struct {
	Path   string `json:"path"`
	Offset uint64 `json:"offset,omitempty"`
	Max    uint64 `json:"max"`
}

// Validate checks the arguments.
func (a *ReadArgs) Validate() error {
	if err := CheckPath(a.Path, false); err != nil {
		return err
	}
	if a.Max == 0 || a.Max > MaxReadBytes {
		return actuation.Refusef(actuation.CodeInvalidSpec, "max must be 1..%d", MaxReadBytes)
	}
	return nil
}

// ReadData answers file.read; the bulk is the bytes read.
type ReadData struct {
	Size   int64 `json:"size"`
	Offset int64 `json:"offset"`
	EOF    bool  `json:"eof"`
}

// StageArgs stages content for Target; the content follows as the request's chunks.
type StageArgs struct {
	Target  string `json:"target"`
	Content Bulk   `json:"content"`
}

// Validate checks the arguments (the transfer itself is checked by CheckTransfer).
func (a *StageArgs) Validate() error {
	if err := CheckPath(a.Target, false); err != nil {
		return err
	}
	if a.Content.Bytes > MaxStageBytes {
		return actuation.Refusef(actuation.CodeTransferTooLarge, "stage of %d bytes exceeds %d", a.Content.Bytes, MaxStageBytes)
	}
	if !ValidDigest(a.Content.Digest) {
		return actuation.Refusef(actuation.CodeMalformedPayload, "content digest is not sha256:<64 hex>")
	}
	return nil
}

// StageData answers patch.stage.
type StageData struct {
	Ref        string `json:"ref"`
	Replayed   bool   `json:"replayed,omitempty"`
	Stages     uint32 `json:"stages"`
	StageBytes uint64 `json:"stageBytes"`
}

// BaseAbsent is the base of a patch.apply that creates a new file.
const BaseAbsent = "absent"

// ApplyArgs atomically replaces Target with the staged content Ref, only if Target's
// current content has digest Base (or does not exist, Base = "absent").
type ApplyArgs struct {
	Ref    string `json:"ref"`
	Target string `json:"target"`
	Base   string `json:"base"`
}

// Validate checks the arguments.
func (a *ApplyArgs) Validate() error {
	if !ValidDigest(a.Ref) {
		return actuation.Refusef(actuation.CodeInvalidSpec, "ref is not sha256:<64 hex>")
	}
	if err := CheckPath(a.Target, false); err != nil {
		return err
	}
	if a.Base != BaseAbsent && !ValidDigest(a.Base) {
		return actuation.Refusef(actuation.CodeInvalidSpec, "base must be %q or sha256:<64 hex>", BaseAbsent)
	}
	return nil
}

// ApplyData answers patch.apply.
type ApplyData struct {
	Digest string `json:"digest"`
	Bytes  uint64 `json:"bytes"`
}

// ExportArgs exports a subtree beneath the root as a tar archive of at most MaxBytes.
type ExportArgs struct {
	Path       string `json:"path,omitempty"`
	MaxBytes   uint64 `json:"maxBytes"`
	MaxEntries uint32 `json:"maxEntries"`
}

// Validate checks the arguments.
func (a *ExportArgs) Validate() error {
	if err := CheckPath(a.Path, true); err != nil {
		return err
	}
	if a.MaxBytes == 0 || a.MaxBytes > MaxExportBytes {
		return actuation.Refusef(actuation.CodeInvalidSpec, "maxBytes must be 1..%d", MaxExportBytes)
	}
	if a.MaxEntries == 0 || a.MaxEntries > MaxExportEntries {
		return actuation.Refusef(actuation.CodeInvalidSpec, "maxEntries must be 1..%d", MaxExportEntries)
	}
	return nil
}

// ExportData answers export; the bulk is the tar archive.
type ExportData struct {
	Entries uint32 `json:"entries"`
}

// Empty is the args of inspect, quiesce and shutdown.
type Empty struct{}

// InspectData answers inspect. Every field is an untrusted guest observation.
type InspectData struct {
	BootID        string   `json:"bootID"`
	AgentVersion  string   `json:"agentVersion"`
	Kernel        string   `json:"kernel"`
	UptimeMS      uint64   `json:"uptimeMS"`
	PID1          bool     `json:"pid1"`
	Quiesced      bool     `json:"quiesced"`
	Stages        uint32   `json:"stages"`
	StageBytes    uint64   `json:"stageBytes"`
	Sessions      uint32   `json:"sessions"`
	Processes     uint32   `json:"processes"`
	Connections   uint32   `json:"connections"`
	NetInterfaces []string `json:"netInterfaces"`
}

// QuiesceData answers quiesce.
type QuiesceData struct {
	Sessions  uint32 `json:"sessions"`
	Processes uint32 `json:"processes"`
}
