package v1alpha1

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Seed 002: operator-authored action catalogs. An ActionCatalog declares actions, each of
// exactly one class C1..C7 with that class's envelope; it runs only while a detached
// Ed25519 signature over the sha256 of its RFC 8785 canonical spec verifies against an
// ActionSigner allowed for its namespace and the action's class. An ActionRun is one
// invocation. The rules live in internal/actions; the API only carries the data.

// ActionClass is one of the seed's closed catalog of action classes.
// +kubebuilder:validation:XValidation:rule="self in ['C1','C2','C3','C4','C5','C6','C7']",message="action-class-unknown: class must be one of C1..C7"
// +kubebuilder:validation:MaxLength=2
type ActionClass string

// The action classes (seed 002).
const (
	ActionClassReadOnlySpawn     ActionClass = "C1" // read-only-spawn
	ActionClassAllowlistedScript ActionClass = "C2" // allowlisted-script
	ActionClassScopedFSWrite     ActionClass = "C3" // scoped-fs-write
	ActionClassEgressNetwork     ActionClass = "C4" // egress-network-spawn
	ActionClassArtifactProducing ActionClass = "C5" // artifact-producing-spawn
	ActionClassComposed          ActionClass = "C6" // composed-spawn
	ActionClassOperatorGated     ActionClass = "C7" // operator-gated-spawn
)

// ExecutableKind says whether the executable is a binary or a script run by an interpreter.
// +kubebuilder:validation:Enum=binary;script
type ExecutableKind string

// Executable kinds.
const (
	ExecutableBinary ExecutableKind = "binary"
	ExecutableScript ExecutableKind = "script"
)

// ActionExecutable names the program an action runs. Only the catalog names it; a run
// never does.
type ActionExecutable struct {
	// kind is binary or script.
	// +required
	Kind ExecutableKind `json:"kind"`
	// path is the absolute host path of the binary or script.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Path string `json:"path"`
	// interpreter is the absolute path of the script's interpreter (scripts only).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Interpreter string `json:"interpreter,omitempty"`
	// sha256 pins the content of path (64 lowercase hex digits); the node checks it
	// immediately before spawn (script-hash-mismatch).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	SHA256 string `json:"sha256,omitempty"`
}

// ScriptParams are the C2 block: the roots a script must resolve beneath.
type ScriptParams struct {
	// allowedRoots are absolute directories; the script's real path must lie beneath one.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=4096
	AllowedRoots []string `json:"allowedRoots"`
}

// FSWriteParams are the C3 block.
type FSWriteParams struct {
	// writeRoot is the directory, as a root of the run's Environment plus a path beneath
	// it, that the process may write beneath (canonicalized on the node; no symlink
	// escape).
	// +required
	WriteRoot CwdAddress `json:"writeRoot"`
	// maxBytesTotal caps the bytes written in one run, enforced while it runs.
	// +required
	MaxBytesTotal int64 `json:"maxBytesTotal"`
	// maxBytesPerFile caps the size of any one file written.
	// +required
	MaxBytesPerFile int64 `json:"maxBytesPerFile"`
	// pathPattern is an optional RE2 regular expression a touched path (relative to
	// writeRoot) must match in full.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	PathPattern string `json:"pathPattern,omitempty"`
}

// EgressProtocol is the protocol of one allowed endpoint.
// +kubebuilder:validation:Enum=tcp;udp;http;https
type EgressProtocol string

// EgressEndpoint is one allowed (host, port, protocol) tuple.
type EgressEndpoint struct {
	// host is a DNS name or an IP literal.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// +required
	Protocol EgressProtocol `json:"protocol"`
}

// EgressParams are the C4 block.
type EgressParams struct {
	// endpoints are the only destinations reachable; DNS answers only their names.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Endpoints []EgressEndpoint `json:"endpoints"`
	// maxBytesTotal caps the bytes of all connections, both directions.
	// +required
	MaxBytesTotal int64 `json:"maxBytesTotal"`
	// maxBytesPerConnection caps one connection, both directions.
	// +required
	MaxBytesPerConnection int64 `json:"maxBytesPerConnection"`
}

// ArtifactParams are the C5 block.
type ArtifactParams struct {
	// +required
	MaxCount int32 `json:"maxCount"`
	// +required
	MaxBytesPer int64 `json:"maxBytesPer"`
	// +required
	MaxBytesTotal int64 `json:"maxBytesTotal"`
	// allowedMediaTypes are exact media types (type/subtype); a sniffed or declared type
	// outside the set is refused promotion.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=127
	AllowedMediaTypes []string `json:"allowedMediaTypes"`
}

// ComposedEffect is one effect category a C6 action may combine.
// +kubebuilder:validation:Enum=read;scoped-fs-write;egress-network;artifact-produce
type ComposedEffect string

// Composed effects.
const (
	EffectRead            ComposedEffect = "read"
	EffectScopedFSWrite   ComposedEffect = "scoped-fs-write"
	EffectEgressNetwork   ComposedEffect = "egress-network"
	EffectArtifactProduce ComposedEffect = "artifact-produce"
)

// ComposedParams are the C6 block; each named effect needs its class block too.
type ComposedParams struct {
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=4
	// +listType=set
	Effects []ComposedEffect `json:"effects"`
}

// StdoutFormat says how stdout is read.
// +kubebuilder:validation:Enum=text;json
type StdoutFormat string

// Stdout formats.
const (
	StdoutText StdoutFormat = "text"
	StdoutJSON StdoutFormat = "json"
)

// ResultContract says what a run's result is.
type ResultContract struct {
	// stdoutFormat text or json; json stdout must parse as one JSON object.
	// +required
	StdoutFormat StdoutFormat `json:"stdoutFormat"`
	// resultPointerFields are the only keys of a json result propagated into
	// status.resultPointers: exact names or one explicit prefix ending in ".*".
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=128
	ResultPointerFields []string `json:"resultPointerFields,omitempty"`
	// signalKind is an audit label for the result (no enforcement).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SignalKind string `json:"signalKind,omitempty"`
}

// OutputLimits cap captured output.
type OutputLimits struct {
	// +required
	StdoutBytes int64 `json:"stdoutBytes"`
	// +required
	StderrBytes int64 `json:"stderrBytes"`
}

// ActionDeclaration is one catalog entry.
type ActionDeclaration struct {
	// id is the stable identifier runs address: [A-Za-z_][A-Za-z0-9_.-]* with at most one
	// "/" namespace separator, at most 128 bytes.
	// +required
	// +kubebuilder:validation:MaxLength=128
	ID string `json:"id"`
	// class is one of C1..C7.
	// +required
	Class ActionClass `json:"class"`
	// group is a free-text navigation label (no enforcement).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Group string `json:"group,omitempty"`
	// description says why the action exists (no enforcement).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`
	// +required
	Executable ActionExecutable `json:"executable"`
	// argvTemplate is the argv: each element a literal or exactly one placeholder
	// "{{name}}" naming a top-level parameter, or "{{params_json}}" (the RFC 8785
	// canonical JSON of all parameters). No shell, no conditionals, no defaults.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=1024
	ArgvTemplate []string `json:"argvTemplate"`
	// workingDirectory is the process's cwd as a root of the run's Environment plus a path;
	// unset means the run's private scratch directory. Only C3 (and C6 with
	// scoped-fs-write) may write, and only beneath writeRoot.
	// +optional
	WorkingDirectory *CwdAddress `json:"workingDirectory,omitempty"`
	// parametersSchema is a JSON Schema (draft 2020-12) the parameters must satisfy.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	ParametersSchema *apiextensionsv1.JSON `json:"parametersSchema,omitempty"`
	// script is the C2 block.
	// +optional
	Script *ScriptParams `json:"script,omitempty"`
	// fsWrite is the C3 block (and C6 scoped-fs-write).
	// +optional
	FSWrite *FSWriteParams `json:"fsWrite,omitempty"`
	// egress is the C4 block (and C6 egress-network).
	// +optional
	Egress *EgressParams `json:"egress,omitempty"`
	// artifact is the C5 block (and C6 artifact-produce).
	// +optional
	Artifact *ArtifactParams `json:"artifact,omitempty"`
	// composed is the C6 block.
	// +optional
	Composed *ComposedParams `json:"composed,omitempty"`
	// environment is the complete process environment: set, never inherited.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	Environment []EnvVar `json:"environment,omitempty"`
	// defaultTimeoutSeconds applies when a run names none.
	// +required
	DefaultTimeoutSeconds int64 `json:"defaultTimeoutSeconds"`
	// maxTimeoutSeconds bounds a run's timeoutSeconds.
	// +required
	MaxTimeoutSeconds int64 `json:"maxTimeoutSeconds"`
	// +required
	OutputLimits OutputLimits `json:"outputLimits"`
	// +required
	ResultContract ResultContract `json:"resultContract"`
	// sensitivity may only declare the baseline class ("class", or the legacy alias
	// "default_class"); any override or other key is a structural error.
	// +optional
	// +kubebuilder:validation:MaxProperties=8
	Sensitivity map[string]string `json:"sensitivity,omitempty"`
}

// ActionCatalogSpec is what a signature covers: RFC 8785 canonical JSON of this struct as
// encoded by encoding/json, then sha256.
type ActionCatalogSpec struct {
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=128
	// +listType=atomic
	Actions []ActionDeclaration `json:"actions"`
}

// CatalogSignature is a detached Ed25519 signature of a catalog's spec. It sits outside
// spec, so writing it does not change what it signs.
type CatalogSignature struct {
	// signerRef names the ActionSigner whose key made the signature.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SignerRef string `json:"signerRef"`
	// specDigest is the digest that was signed (sha256:<hex> of the canonical spec);
	// informative: verification recomputes it from spec.
	// +required
	SpecDigest Digest `json:"specDigest"`
	// value is the standard base64 Ed25519 signature over the 32 raw bytes of the digest.
	// +required
	// +kubebuilder:validation:MaxLength=128
	Value string `json:"value"`
	// signedAt is informative.
	// +optional
	SignedAt *metav1.Time `json:"signedAt,omitempty"`
}

// ActionAuthorization is the signature state of a catalog or of one action.
// +kubebuilder:validation:Enum=Authorized;Unauthorized;Bootstrap
type ActionAuthorization string

// Authorization states. Bootstrap: unsigned, tolerated by signaturePolicy Bootstrap; runs
// record unauthorized=true.
const (
	ActionAuthorized   ActionAuthorization = "Authorized"
	ActionUnauthorized ActionAuthorization = "Unauthorized"
	ActionBootstrap    ActionAuthorization = "Bootstrap"
)

// ActionAvailability says whether some node can enforce the action's class.
// +kubebuilder:validation:Enum=Available;Unavailable;Unknown
type ActionAvailability string

// Availability states.
const (
	ActionAvailable   ActionAvailability = "Available"
	ActionUnavailable ActionAvailability = "Unavailable"
	ActionUnknown     ActionAvailability = "Unknown"
)

// ActionStatus is the manager's verdict on one declared action.
type ActionStatus struct {
	// +required
	// +kubebuilder:validation:MaxLength=128
	ID string `json:"id"`
	// +optional
	Class ActionClass `json:"class,omitempty"`
	// +required
	Authorization ActionAuthorization `json:"authorization"`
	// +required
	Availability ActionAvailability `json:"availability"`
	// code is the refusal code when not authorized or unavailable.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Code string `json:"code,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// ActionCatalogStatus is written by the manager only.
type ActionCatalogStatus struct {
	// specDigest is sha256:<hex> of the canonical spec.
	// +optional
	SpecDigest Digest `json:"specDigest,omitempty"`
	// authorization of the catalog as a whole (signature and signer).
	// +optional
	Authorization ActionAuthorization `json:"authorization,omitempty"`
	// signer is the ActionSigner whose signature verified.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Signer string `json:"signer,omitempty"`
	// actions is the per-action verdict.
	// +optional
	// +kubebuilder:validation:MaxItems=128
	// +listType=map
	// +listMapKey=id
	Actions []ActionStatus `json:"actions,omitempty"`
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Valid (structure), Authorized (signature).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ActionCatalog is a signed set of action declarations (seed 002).
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbcat,categories=workbench
// +kubebuilder:printcolumn:name="Authorization",type=string,JSONPath=`.status.authorization`
// +kubebuilder:printcolumn:name="Signer",type=string,JSONPath=`.status.signer`
// +kubebuilder:printcolumn:name="Digest",type=string,JSONPath=`.status.specDigest`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ActionCatalog struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec ActionCatalogSpec `json:"spec"`
	// signature authorizes spec; outside spec so that writing it leaves the digest alone.
	// +optional
	Signature *CatalogSignature `json:"signature,omitempty"`
	// +optional
	Status ActionCatalogStatus `json:"status,omitempty"`
}

// ActionCatalogList is a list of ActionCatalogs.
// +kubebuilder:object:root=true
type ActionCatalogList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ActionCatalog `json:"items"`
}

// ActionRunPhase is a one-word summary derived from conditions (ActionRunPhaseFor).
// +kubebuilder:validation:Enum=Pending;AwaitingConsent;Running;Succeeded;Failed;TimedOut;Cancelled;Refused
type ActionRunPhase string

// ActionRunSpec is one invocation of a catalog action. Immutable except desiredState.
// +kubebuilder:validation:XValidation:rule="self.catalogRef == oldSelf.catalogRef && self.actionId == oldSelf.actionId && self.environmentRef == oldSelf.environmentRef && has(self.parameters) == has(oldSelf.parameters) && (!has(self.parameters) || self.parameters == oldSelf.parameters) && has(self.timeoutSeconds) == has(oldSelf.timeoutSeconds) && (!has(self.timeoutSeconds) || self.timeoutSeconds == oldSelf.timeoutSeconds) && has(self.expectedSpecDigest) == has(oldSelf.expectedSpecDigest) && (!has(self.expectedSpecDigest) || self.expectedSpecDigest == oldSelf.expectedSpecDigest)",message="immutable: spec is immutable except desiredState (Cancelled)"
// +kubebuilder:validation:XValidation:rule="!has(oldSelf.desiredState) || (has(self.desiredState) && self.desiredState == oldSelf.desiredState)",message="immutable: a cancelled run stays cancelled"
type ActionRunSpec struct {
	// catalogRef names the ActionCatalog in this namespace.
	// +required
	CatalogRef ObjectName `json:"catalogRef"`
	// actionId names the action within the catalog.
	// +required
	// +kubebuilder:validation:MaxLength=128
	ActionID string `json:"actionId"`
	// parameters are the typed parameters, validated against the action's schema.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	// +kubebuilder:validation:Type=object
	Parameters *apiextensionsv1.JSON `json:"parameters,omitempty"`
	// environmentRef names the Environment whose workspace and node the run uses.
	// +required
	EnvironmentRef ObjectName `json:"environmentRef"`
	// timeoutSeconds, at most the action's maxTimeoutSeconds; the action's
	// defaultTimeoutSeconds when unset.
	// +optional
	// +kubebuilder:validation:Minimum=1
	TimeoutSeconds *int64 `json:"timeoutSeconds,omitempty"`
	// expectedSpecDigest pins the catalog spec the proposer saw; a different current spec
	// refuses with allowlist-catalog-mismatch.
	// +optional
	ExpectedSpecDigest Digest `json:"expectedSpecDigest,omitempty"`
	// desiredState Cancelled stops the run (as TerminalCommand).
	// +optional
	DesiredState CommandDesiredState `json:"desiredState,omitempty"`
}

// TouchedFile is one file a C3 run wrote, relative to the write root.
type TouchedFile struct {
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Path string `json:"path"`
	// +required
	Size int64 `json:"size"`
	// +optional
	Digest Digest `json:"digest,omitempty"`
}

// ConnectionRecord is one connection of a C4 run's network transcript.
type ConnectionRecord struct {
	// +required
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`
	// +required
	Port int32 `json:"port"`
	// +required
	Protocol EgressProtocol `json:"protocol"`
	// +optional
	BytesOut int64 `json:"bytesOut,omitempty"`
	// +optional
	BytesIn int64 `json:"bytesIn,omitempty"`
	// +optional
	DurationMillis int64 `json:"durationMillis,omitempty"`
	// refusal code when the proxy refused or cut the connection (egress-forbidden, a cap).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Code string `json:"code,omitempty"`
}

// ArtifactRef is one promoted C5 artifact.
type ArtifactRef struct {
	// name of the Artifact object.
	// +required
	Name ObjectName `json:"name"`
	// +required
	Digest Digest `json:"digest"`
	// +optional
	// +kubebuilder:validation:MaxLength=127
	MediaType string `json:"mediaType,omitempty"`
	// +optional
	Size int64 `json:"size,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Role string `json:"role,omitempty"`
}

// ActionRunStatus: the manager writes admission (Admitted, admission fields, and the
// outcome of a run it refused); the node agent writes execution (Started, Completed,
// exit, capture) of an admitted run. See docs/actions.md.
type ActionRunStatus struct {
	// --- manager (field manager workbench-manager/actionrun) ---

	// +optional
	Phase ActionRunPhase `json:"phase,omitempty"`
	// class of the action when admitted.
	// +optional
	Class ActionClass `json:"class,omitempty"`
	// specDigest of the catalog spec the run was admitted against; the node refuses when
	// the current spec differs (action-catalog-unauthorized).
	// +optional
	SpecDigest Digest `json:"specDigest,omitempty"`
	// paramsDigest is sha256 of the canonical parameters.
	// +optional
	ParamsDigest Digest `json:"paramsDigest,omitempty"`
	// argv as rendered at admission (audit; the node renders again and must agree).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=32768
	Argv []string `json:"argv,omitempty"`
	// timeoutSeconds is the effective timeout.
	// +optional
	TimeoutSeconds int64 `json:"timeoutSeconds,omitempty"`
	// signer whose signature authorized the catalog at admission.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Signer string `json:"signer,omitempty"`
	// unauthorized is true when the run was admitted under signaturePolicy Bootstrap with
	// an unsigned catalog (seed: connector/unauthorized).
	// +optional
	Unauthorized bool `json:"unauthorized,omitempty"`
	// consentRequestRef names the ConsentRequest of a C7 run.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ConsentRequestRef string `json:"consentRequestRef,omitempty"`
	// catalogDeltaRef names the unsigned ActionCatalog produced when an operator chose
	// "add to catalog" for this run.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CatalogDeltaRef string `json:"catalogDeltaRef,omitempty"`

	// --- shared: refusal, completionTime (manager for a run refused at admission,
	// node agent for an admitted run) ---

	// +optional
	Refusal *Refusal `json:"refusal,omitempty"`
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// --- node agent (field manager workbench-node-agent/actionrun) ---

	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// +optional
	SignalOrigin SignalOrigin `json:"signalOrigin,omitempty"`
	// +optional
	StdoutBytes int64 `json:"stdoutBytes,omitempty"`
	// +optional
	StderrBytes int64 `json:"stderrBytes,omitempty"`
	// truncated is true when stdout or stderr reached its cap.
	// +optional
	Truncated bool `json:"truncated,omitempty"`
	// stdout is the retained stdout (text results), at most 4096 bytes here; the full
	// capped output is in outputDigest's artifact when one is promoted.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Stdout string `json:"stdout,omitempty"`
	// +optional
	OutputDigest Digest `json:"outputDigest,omitempty"`
	// resultPointers are the declared pointer fields of a json result: key → canonical
	// JSON of the value.
	// +optional
	// +kubebuilder:validation:MaxProperties=64
	ResultPointers map[string]string `json:"resultPointers,omitempty"`
	// touchedFiles (C3, C6 scoped-fs-write).
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	TouchedFiles []TouchedFile `json:"touchedFiles,omitempty"`
	// touchedFilesTruncated is true when more files were touched than listed.
	// +optional
	TouchedFilesTruncated bool `json:"touchedFilesTruncated,omitempty"`
	// networkTranscript (C4, C6 egress-network).
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	NetworkTranscript []ConnectionRecord `json:"networkTranscript,omitempty"`
	// artifactRefs (C5, C6 artifact-produce), in promotion order.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	ArtifactRefs []ArtifactRef `json:"artifactRefs,omitempty"`

	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions: Admitted (manager), Started and Completed (node; manager's Completed only
	// for a refused run), Reconciling and Stalled (manager, derived).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ActionRun is one invocation of a catalog action.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbrun,categories=workbench
// +kubebuilder:printcolumn:name="Catalog",type=string,JSONPath=`.spec.catalogRef`
// +kubebuilder:printcolumn:name="Action",type=string,JSONPath=`.spec.actionId`
// +kubebuilder:printcolumn:name="Class",type=string,JSONPath=`.status.class`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Exit",type=integer,JSONPath=`.status.exitCode`
// +kubebuilder:printcolumn:name="Refusal",type=string,JSONPath=`.status.refusal.code`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ActionRun struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec ActionRunSpec `json:"spec"`
	// +optional
	Status ActionRunStatus `json:"status,omitempty"`
}

// ActionRunList is a list of ActionRuns.
// +kubebuilder:object:root=true
type ActionRunList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ActionRun `json:"items"`
}

// ActionSignerSpec is an Ed25519 public key and what it may sign.
type ActionSignerSpec struct {
	// publicKey is the standard base64 of the 32-byte Ed25519 public key.
	// +required
	// +kubebuilder:validation:MinLength=44
	// +kubebuilder:validation:MaxLength=44
	PublicKey string `json:"publicKey"`
	// namespaces the signer may authorize catalogs in: exact names, or the single
	// explicit entry "*" for all namespaces. Never empty.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=256
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=63
	Namespaces []string `json:"namespaces"`
	// classes the signer may authorize; an action of another class stays unauthorized.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=7
	// +listType=set
	Classes []ActionClass `json:"classes"`
	// description names the holder (audit aid).
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Description string `json:"description,omitempty"`
}

// ActionSignerStatus is written by nobody yet; reserved for key fingerprints.
type ActionSignerStatus struct {
	// keyID is sha256:<hex> of the raw public key.
	// +optional
	KeyID Digest `json:"keyID,omitempty"`
}

// ActionSigner is a cluster-scoped trusted catalog signer.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=wbsigner,categories=workbench
// +kubebuilder:printcolumn:name="Namespaces",type=string,JSONPath=`.spec.namespaces`
// +kubebuilder:printcolumn:name="Classes",type=string,JSONPath=`.spec.classes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ActionSigner struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +required
	Spec ActionSignerSpec `json:"spec"`
	// +optional
	Status ActionSignerStatus `json:"status,omitempty"`
}

// ActionSignerList is a list of ActionSigners.
// +kubebuilder:object:root=true
type ActionSignerList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ActionSigner `json:"items"`
}

// Posture is the host posture.
// +kubebuilder:validation:Enum=Normal;Emergency
type Posture string

// Postures.
const (
	PostureNormal    Posture = "Normal"
	PostureEmergency Posture = "Emergency"
)

// SignaturePolicy says what an unsigned catalog may do.
// +kubebuilder:validation:Enum=Strict;Bootstrap
type SignaturePolicy string

// Signature policies. Strict: only a verified signature authorizes. Bootstrap: a catalog
// with no signature at all runs, reported Bootstrap and every run marked unauthorized; a
// present but failing signature is refused as under Strict.
const (
	SignatureStrict    SignaturePolicy = "Strict"
	SignatureBootstrap SignaturePolicy = "Bootstrap"
)

// EmergencyException lets one action run under Emergency posture.
type EmergencyException struct {
	// +required
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// +required
	CatalogRef ObjectName `json:"catalogRef"`
	// +required
	// +kubebuilder:validation:MaxLength=128
	ActionID string `json:"actionId"`
}

// WorkbenchPolicySpec is host policy. A missing policy object means Normal and Strict.
type WorkbenchPolicySpec struct {
	// +optional
	// +kubebuilder:default=Normal
	Posture Posture `json:"posture,omitempty"`
	// emergencyExceptions name actions of C3..C6 that still run under Emergency.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	EmergencyExceptions []EmergencyException `json:"emergencyExceptions,omitempty"`
	// +optional
	// +kubebuilder:default=Strict
	SignaturePolicy SignaturePolicy `json:"signaturePolicy,omitempty"`
}

// WorkbenchPolicyStatus is reserved.
type WorkbenchPolicyStatus struct {
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// WorkbenchPolicyName is the singleton's name.
const WorkbenchPolicyName = "default"

// WorkbenchPolicy is the cluster singleton "default" of host policy.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=wbpolicy,categories=workbench
// +kubebuilder:validation:XValidation:rule="self.metadata.name == 'default'",message="policy-invalid: the WorkbenchPolicy singleton is named default"
// +kubebuilder:printcolumn:name="Posture",type=string,JSONPath=`.spec.posture`
// +kubebuilder:printcolumn:name="Signatures",type=string,JSONPath=`.spec.signaturePolicy`
type WorkbenchPolicy struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// +optional
	Spec WorkbenchPolicySpec `json:"spec,omitempty"`
	// +optional
	Status WorkbenchPolicyStatus `json:"status,omitempty"`
}

// WorkbenchPolicyList is a list of WorkbenchPolicies.
// +kubebuilder:object:root=true
type WorkbenchPolicyList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkbenchPolicy `json:"items"`
}

func init() {
	SchemeBuilder.Register(&ActionCatalog{}, &ActionCatalogList{}, &ActionRun{}, &ActionRunList{},
		&ActionSigner{}, &ActionSignerList{}, &WorkbenchPolicy{}, &WorkbenchPolicyList{})
}
