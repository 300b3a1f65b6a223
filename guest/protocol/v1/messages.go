package protocol

import (
	"bytes"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"io"
	"strconv"
	"strings"

	"sensorium.dev/workbench/internal/actuation"
)

// Binding is what binds one channel to one boot of one environment generation. The guest
// reads its expected binding from a read-only boot input (QEMU fw_cfg); the host derives
// the one it sends from its recovery record.
type Binding struct {
	EnvironmentRef   string `json:"environmentRef"`
	SourceGeneration int64  `json:"sourceGeneration"`
	PlanDigest       string `json:"planDigest"`
	ImageDigest      string `json:"imageDigest"`
	GuestCID         uint32 `json:"guestCID"`
	BootNonce        string `json:"bootNonce"`
}

// Caps of binding fields.
const (
	MaxEnvironmentRef = 317 // namespace (63) + "/" + name (253)
	NonceHexLen       = 64  // 32 random bytes
)

// Validate checks the binding's own form.
func (b *Binding) Validate() error {
	if b.EnvironmentRef == "" || len(b.EnvironmentRef) > MaxEnvironmentRef || !printableNoSpace(b.EnvironmentRef) {
		return actuation.Refusef(actuation.CodeBindingInvalid, "environment ref must be 1..%d printable ASCII bytes without spaces", MaxEnvironmentRef)
	}
	if b.SourceGeneration < 1 {
		return actuation.Refusef(actuation.CodeBindingInvalid, "source generation %d < 1", b.SourceGeneration)
	}
	if !ValidDigest(b.PlanDigest) || !ValidDigest(b.ImageDigest) {
		return actuation.Refusef(actuation.CodeBindingInvalid, "plan and image digests must be sha256:<64 hex>")
	}
	if b.GuestCID < 3 {
		return actuation.Refusef(actuation.CodeBindingInvalid, "guest CID %d is reserved", b.GuestCID)
	}
	if len(b.BootNonce) != NonceHexLen || !isLowerHex(b.BootNonce) {
		return actuation.Refusef(actuation.CodeBindingInvalid, "boot nonce must be %d lowercase hex digits", NonceHexLen)
	}
	return nil
}

func printableNoSpace(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] > '~' {
			return false
		}
	}
	return true
}

// Handshake is the payload of the first frame of every connection.
type Handshake struct {
	Protocol int `json:"protocol"`
	Binding
}

// Check compares a received handshake with the expected binding, field by field and
// exactly; the nonce comparison is constant-time. It returns a refusal naming the first
// mismatching field.
func (b *Binding) Check(h *Handshake) error {
	if h.Protocol != Version {
		return actuation.Refusef(actuation.CodeProtocolMismatch, "protocol %d, guest speaks %d", h.Protocol, Version)
	}
	if err := h.Validate(); err != nil {
		return err
	}
	switch {
	case h.EnvironmentRef != b.EnvironmentRef:
		return actuation.Refusef(actuation.CodeEnvironmentMismatch, "environment ref does not match this boot")
	case h.SourceGeneration != b.SourceGeneration:
		return actuation.Refusef(actuation.CodeGenerationMismatch, "source generation %d, this boot is generation %d", h.SourceGeneration, b.SourceGeneration)
	case h.PlanDigest != b.PlanDigest:
		return actuation.Refusef(actuation.CodePlanDigestMismatch, "plan digest does not match this boot")
	case h.ImageDigest != b.ImageDigest:
		return actuation.Refusef(actuation.CodeImageDigestMismatch, "image digest does not match this boot")
	case h.GuestCID != b.GuestCID:
		return actuation.Refusef(actuation.CodeCIDMismatch, "guest CID %d, this boot is CID %d", h.GuestCID, b.GuestCID)
	case subtle.ConstantTimeCompare([]byte(h.BootNonce), []byte(b.BootNonce)) != 1:
		return actuation.Refusef(actuation.CodeNonceMismatch, "boot nonce does not match this boot (stale or foreign)")
	}
	return nil
}

// Limits are the wire limits, repeated in the handshake answer for the host to check
// against its own constants.
type Limits struct {
	MaxPayload    uint32 `json:"maxPayload"`
	MaxChunks     uint32 `json:"maxChunks"`
	MaxTransfer   uint64 `json:"maxTransfer"`
	MaxDeadlineMS uint32 `json:"maxDeadlineMS"`
	MaxStages     uint32 `json:"maxStages"`
	MaxStageBytes uint64 `json:"maxStageBytes"`
}

// WireLimits returns the V1 limits.
func WireLimits() Limits {
	return Limits{MaxPayload: MaxPayload, MaxChunks: MaxChunks, MaxTransfer: MaxTransfer, MaxDeadlineMS: MaxDeadlineMS, MaxStages: MaxStages, MaxStageBytes: MaxStageBytes}
}

// HandshakeAck is the data of the result frame answering a handshake.
type HandshakeAck struct {
	Protocol     int    `json:"protocol"`
	Channel      string `json:"channel"`
	BootID       string `json:"bootID"`
	AgentVersion string `json:"agentVersion"`
	Limits       Limits `json:"limits"`
}

// ChannelHexLen is the length of a channel id (16 random bytes).
const ChannelHexLen = 32

// Validate checks the ack's form (the host treats it as untrusted).
func (a *HandshakeAck) Validate() error {
	if a.Protocol != Version {
		return actuation.Refusef(actuation.CodeProtocolMismatch, "guest answered protocol %d", a.Protocol)
	}
	if len(a.Channel) != ChannelHexLen || !isLowerHex(a.Channel) {
		return actuation.Refusef(actuation.CodeMalformedPayload, "channel id is not %d hex digits", ChannelHexLen)
	}
	if len(a.BootID) > 64 || len(a.AgentVersion) > 128 {
		return actuation.Refusef(actuation.CodeMalformedPayload, "boot id or agent version too long")
	}
	if a.Limits != WireLimits() {
		return actuation.Refusef(actuation.CodeMalformedPayload, "guest limits %+v differ from %+v", a.Limits, WireLimits())
	}
	return nil
}

// Op is an operation name.
type Op string

// The closed V1 operation set.
const (
	OpSpawn        Op = "spawn"
	OpPTYOpen      Op = "pty.open"
	OpPTYRead      Op = "pty.read"
	OpPTYInput     Op = "pty.input"
	OpPTYResize    Op = "pty.resize"
	OpPTYClose     Op = "pty.close"
	OpSignal       Op = "signal"
	OpFileSnapshot Op = "file.snapshot"
	OpFileRead     Op = "file.read"
	OpPatchStage   Op = "patch.stage"
	OpPatchApply   Op = "patch.apply"
	OpExport       Op = "export"
	OpInspect      Op = "inspect"
	OpQuiesce      Op = "quiesce"
	OpShutdown     Op = "shutdown"
	OpRebind       Op = "rebind" // rebind.go
)

// Ops lists the operation set in a fixed order.
var Ops = []Op{OpSpawn, OpPTYOpen, OpPTYRead, OpPTYInput, OpPTYResize, OpPTYClose, OpSignal,
	OpFileSnapshot, OpFileRead, OpPatchStage, OpPatchApply, OpExport, OpInspect, OpQuiesce, OpShutdown, OpRebind}

// Known reports whether op is in the closed set.
func (op Op) Known() bool {
	for _, o := range Ops {
		if o == op {
			return true
		}
	}
	return false
}

// Request is the payload of a request frame.
type Request struct {
	Op      Op              `json:"op"`
	OpID    string          `json:"opID"`
	Channel string          `json:"channel"`
	Args    json.RawMessage `json:"args"`
}

// MaxIDLen bounds operation and session ids.
const MaxIDLen = 64

// ValidID reports whether s is 1..MaxIDLen of [A-Za-z0-9._-].
func ValidID(s string) bool {
	if s == "" || len(s) > MaxIDLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '.' || c == '_' || c == '-') {
			return false
		}
	}
	return true
}

// Result is the payload of a result frame.
type Result struct {
	Op      Op              `json:"op,omitempty"`
	OpID    string          `json:"opID,omitempty"`
	Outcome Outcome         `json:"outcome"`
	Code    string          `json:"code,omitempty"`
	Message string          `json:"message,omitempty"`
	Data    json.RawMessage `json:"data,omitempty"`
	Bulk    *Bulk           `json:"bulk,omitempty"`
}

// ErrorPayload is the payload of an error frame.
type ErrorPayload struct {
	Code    string `json:"code"`
	Message string `json:"message,omitempty"`
}

// MaxMessage bounds human messages in results and errors.
const MaxMessage = 1024

// Truncate cuts s to at most MaxMessage bytes.
func Truncate(s string) string {
	if len(s) > MaxMessage {
		return s[:MaxMessage]
	}
	return s
}

// DecodeJSON decodes one JSON object strictly: unknown fields, trailing data and type
// mismatches are refused as malformed-payload. The input is already bounded by the
// frame size (or the transfer cap).
func DecodeJSON(b []byte, v any) error {
	if len(b) == 0 || b[0] != '{' {
		return actuation.Refusef(actuation.CodeMalformedPayload, "payload is not a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return actuation.Refusef(actuation.CodeMalformedPayload, "%s", Truncate(err.Error()))
	}
	if _, err := dec.Token(); err != io.EOF {
		return actuation.Refusef(actuation.CodeMalformedPayload, "trailing data after the JSON object")
	}
	return nil
}

// StageRef is the content-bound ref of a staged patch: the digest of the target path, the
// content length and the content digest. The host computes it too and compares.
func StageRef(target string, size uint64, contentDigest string) string {
	h := sha256.New()
	h.Write([]byte("workbench-patch-stage.v1\x00"))
	h.Write([]byte(target))
	h.Write([]byte{0})
	h.Write([]byte(strconv.FormatUint(size, 10)))
	h.Write([]byte{0})
	h.Write([]byte(contentDigest))
	return DigestPrefix + hex.EncodeToString(h.Sum(nil))
}

// MaxPathLen bounds a root-relative path (the host's bound).
const MaxPathLen = actuation.MaxPathBytes

// CheckPath checks a root-relative path lexically with the host's one rule,
// actuation.ValidateRelativePath (the golden vectors of test/vectors/relative-path.json
// run against it): "" (the root itself) is allowed only when allowRoot. The refusal
// carries the rule's path code. The guest still resolves every path with openat2
// RESOLVE_BENEATH; a resolution outside the root is CodePathEscapesRoot.
func CheckPath(p string, allowRoot bool) error {
	if r := actuation.ValidateRelativePath(p, !allowRoot); r != nil {
		return actuation.Refusef(r.Code, "%s %q: %s", r.Field, truncatePath(p), r.Message)
	}
	return nil
}

// truncatePath bounds an untrusted path quoted in a refusal message.
func truncatePath(p string) string {
	const max = 128
	if len(p) <= max {
		return p
	}
	return p[:max] + "..."
}

// checkArgvEnv bounds argv and env.
func checkArgvEnv(argv, env []string) error {
	if len(argv) == 0 || len(argv) > MaxArgs {
		return actuation.Refusef(actuation.CodeInvalidSpec, "argv must have 1..%d entries", MaxArgs)
	}
	if !strings.HasPrefix(argv[0], "/") {
		return actuation.Refusef(actuation.CodeInvalidSpec, "argv[0] %q must be an absolute executable path", argv[0])
	}
	if len(env) > MaxEnv {
		return actuation.Refusef(actuation.CodeInvalidSpec, "more than %d environment entries", MaxEnv)
	}
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return actuation.Refusef(actuation.CodeInvalidSpec, "argv entry contains NUL")
		}
	}
	for _, e := range env {
		k, _, ok := strings.Cut(e, "=")
		if !ok || k == "" || strings.IndexByte(e, 0) >= 0 {
			return actuation.Refusef(actuation.CodeInvalidSpec, "environment entry %q is not KEY=VALUE", Truncate(e))
		}
	}
	return nil
}
