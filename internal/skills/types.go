// Package skills is the domain core of seed 004: a Recording's interaction
// trace (edges with workspace state hashes before and after), crystallizing a
// trace into a parameterized Skill manifest, replay planning and divergence
// detection (SurpriseSignal, fidelity), the ProofResult computed only from
// evidence, and the SkillBundle export/import with redaction, secret detection
// and an RFC 8785 content hash. It performs no I/O and has no Kubernetes
// imports: the node agent records, the manager's controllers replay, the CLI
// exports and imports, and all of them decide here.
package skills

import (
	"time"

	"github.com/google/uuid"
)

// Versions written into every bundle and manifest.
const (
	BundleVersion    = "0.1.0"
	ManifestSchema   = "workbench.sensorium.dev/skill-manifest/v0.1"
	ProofSchema      = "workbench.sensorium.dev/proof-result/v0.1"
	TraceSchema      = "workbench.sensorium.dev/interaction-trace/v0.1"
	ProtocolVersion  = "workbench.sensorium.dev/v1alpha1"
	VerifierVersion  = "workbench-skills@0.1.0"
	FallbackBehavior = "halt_on_state_hash_mismatch"
)

// Caps of the domain objects; each has an explicit refusal.
const (
	MaxEdges           = 256       // edges in one trace / steps in one skill
	MaxChangesPerEdge  = 256       // path changes recorded per edge
	MaxInitialEntries  = 4096      // entries of the initial state listed in a trace and manifest (the digest always)
	MaxOutputBytes     = 16 << 10  // command output kept in the trace per edge
	MaxPatchBytes      = 256 << 10 // patch text kept per edge
	MaxParameters      = 32
	MaxParameterValue  = 4096
	MaxBundleBytes     = 16 << 20 // an imported or exported bundle
	MaxArgvAtoms       = 256
	MaxNameLength      = 253
	MaxDescriptionSize = 4096
)

// NewID returns a UUIDv7 (sortable by creation time).
func NewID() string { return uuid.Must(uuid.NewV7()).String() }

// EdgeKind is what produced an edge.
type EdgeKind string

const (
	EdgeCommand EdgeKind = "command" // an admitted TerminalCommand that ran
	EdgePatch   EdgeKind = "patch"   // an applied FilePatch
	EdgeWait    EdgeKind = "wait"    // a satisfied Wait
	EdgeProbe   EdgeKind = "probe"   // a Probe
)

// AuthorizationKind is what admitted an edge.
type AuthorizationKind string

const (
	AuthProfile  AuthorizationKind = "profile"  // a CommandProfile admitted the argv
	AuthGrant    AuthorizationKind = "grant"    // an operator's ConsentGrant admitted it
	AuthApproval AuthorizationKind = "approval" // an approved FilePatch
	AuthObserve  AuthorizationKind = "observe"  // a wait or probe: read-only, admitted by RBAC on create
)

// Authorization records who or what admitted an edge.
type Authorization struct {
	Kind AuthorizationKind `json:"kind"`
	Ref  string            `json:"ref"`
}

// PathState is one path's entry in a workspace state.
type PathState struct {
	Type   string `json:"type"`
	Mode   uint32 `json:"mode"`
	Digest string `json:"digest"`
}

// PathChange is one path's difference across an edge; a nil side is absent.
type PathChange struct {
	Path   string     `json:"path"`
	Before *PathState `json:"before,omitempty"`
	After  *PathState `json:"after,omitempty"`
}

// StateEntry is one entry of a full state listing.
type StateEntry struct {
	Path string `json:"path"`
	PathState
}

// StateRef is a workspace state: its digest and (bounded) entry listing.
type StateRef struct {
	Digest  string       `json:"digest"`
	Entries []StateEntry `json:"entries,omitempty"`
}

// Cwd is a working directory inside an environment root.
type Cwd struct {
	Root string `json:"root"`
	Path string `json:"path,omitempty"`
}

// Outcome is how an edge ended.
type Outcome struct {
	Phase    string `json:"phase"`
	ExitCode *int32 `json:"exit_code,omitempty"`
	Code     string `json:"code,omitempty"` // refusal code, when refused
}

// CommandEdge is the command part of an edge.
type CommandEdge struct {
	Profile         string   `json:"profile"`
	Argv            []string `json:"argv,omitempty"`
	ArgvDigest      string   `json:"argv_digest"`
	Cwd             Cwd      `json:"cwd"`
	OutputDigest    string   `json:"output_digest,omitempty"`
	OutputBytes     int64    `json:"output_bytes"`
	Output          *string  `json:"output,omitempty"` // first MaxOutputBytes of the output; stripped by redaction
	OutputTruncated bool     `json:"output_truncated,omitempty"`
}

// PatchOperation is one structured file operation.
type PatchOperation struct {
	Op            string  `json:"op"`
	Path          string  `json:"path"`
	Content       *string `json:"content,omitempty"` // stripped by redaction
	ContentDigest string  `json:"content_digest,omitempty"`
	ContentBytes  int64   `json:"content_bytes,omitempty"`
}

// PatchEdge is the patch part of an edge.
type PatchEdge struct {
	Root        string           `json:"root"`
	Format      string           `json:"format"`
	Patch       *string          `json:"patch,omitempty"` // unified text; stripped by redaction
	PatchDigest string           `json:"patch_digest,omitempty"`
	PatchBytes  int64            `json:"patch_bytes,omitempty"`
	Operations  []PatchOperation `json:"operations,omitempty"`
	Digest      string           `json:"digest"` // the FilePatch's spec.digest
}

// ConditionEdge is the wait or probe part of an edge.
type ConditionEdge struct {
	Condition string `json:"condition"`
	Result    string `json:"result"`
}

// Edge is one recorded interaction: the state before, the effect, the state
// after, and what admitted it.
type Edge struct {
	Seq    int      `json:"seq"` // 1-based, contiguous
	Kind   EdgeKind `json:"kind"`
	Object string   `json:"object"` // the object's name in the recorded namespace
	// CorrelationID is the recorded object's correlation id (its
	// workbench.sensorium.dev/correlation-id label), when it carries one.
	CorrelationID string       `json:"correlation_id,omitempty"`
	Backend       string       `json:"backend"`
	StateBefore   string       `json:"state_before"`
	StateAfter    string       `json:"state_after"`
	Changes       []PathChange `json:"changes,omitempty"`
	// OutOfBand lists paths changed between the previous edge and this one by something
	// that was not recorded; a trace with such a gap is incomplete.
	OutOfBand     []PathChange   `json:"out_of_band,omitempty"`
	Command       *CommandEdge   `json:"command,omitempty"`
	Patch         *PatchEdge     `json:"patch,omitempty"`
	Condition     *ConditionEdge `json:"condition,omitempty"`
	Outcome       Outcome        `json:"outcome"`
	Authorization Authorization  `json:"authorization"`
	RecordedAt    time.Time      `json:"recorded_at"`
}

// Trace is a Recording's interaction trace (seed 004 InteractionTrace).
type Trace struct {
	Schema       string    `json:"schema"`
	TraceID      string    `json:"trace_id"`
	Recording    string    `json:"recording"` // namespace/name
	Environment  string    `json:"environment"`
	Backend      string    `json:"backend"`
	StartedAt    time.Time `json:"started_at"`
	StoppedAt    time.Time `json:"stopped_at,omitzero"`
	InitialState StateRef  `json:"initial_state"`
	Edges        []Edge    `json:"edges"`
}

// Parameter is a named input of a skill; Default is the demonstrated value.
type Parameter struct {
	Name        string `json:"name"`
	Default     string `json:"default"`
	Occurrences int    `json:"occurrences"`
}

// Capabilities are what a skill declares it uses. A replay step needing
// anything else fails gate.no_hidden_capability.
type Capabilities struct {
	Profiles  []string `json:"profiles,omitempty"`
	ActionIDs []string `json:"action_ids,omitempty"`
	Backends  []string `json:"backends,omitempty"`
}

// CommandStep is a command to run on replay; argv atoms and the cwd path may
// hold "{{name}}" parameter references.
type CommandStep struct {
	Profile string   `json:"profile"`
	Argv    []string `json:"argv"`
	Cwd     Cwd      `json:"cwd"`
}

// PatchStep is a patch to apply on replay; text, paths and contents may hold
// parameter references.
type PatchStep struct {
	Root       string           `json:"root"`
	Format     string           `json:"format"`
	Patch      *string          `json:"patch,omitempty"`
	Operations []PatchOperation `json:"operations,omitempty"`
}

// Step is one ordered step of a skill with the state it expects.
type Step struct {
	Index           int            `json:"index"` // 1-based: the edge number on replay
	Kind            EdgeKind       `json:"kind"`
	Command         *CommandStep   `json:"command,omitempty"`
	Patch           *PatchStep     `json:"patch,omitempty"`
	Condition       *ConditionEdge `json:"condition,omitempty"`
	ExpectedBefore  string         `json:"expected_before"`
	ExpectedAfter   string         `json:"expected_after"`
	ExpectedChanges []PathChange   `json:"expected_changes,omitempty"`
	ExpectedOutcome Outcome        `json:"expected_outcome"`
	Parameters      []string       `json:"parameters,omitempty"` // parameters the step references
}

// Manifest is a crystallized skill (seed 004 SkillManifest).
type Manifest struct {
	Schema             string       `json:"schema"`
	SkillID            string       `json:"skill_id"`
	Name               string       `json:"name"`
	Slug               string       `json:"slug"`
	Description        string       `json:"description,omitempty"`
	Version            int          `json:"version"`
	DerivedFromTraceID string       `json:"derived_from_trace_id"`
	Backend            string       `json:"backend"`
	Parameters         []Parameter  `json:"parameters,omitempty"`
	Steps              []Step       `json:"steps"`
	InitialState       StateRef     `json:"initial_state"`
	Capabilities       Capabilities `json:"capabilities"`
	FallbackBehavior   string       `json:"fallback_behavior"`
	CreatedAt          time.Time    `json:"created_at"`
}
