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
	// port is the destination TCP or UDP port the action may connect to.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65535
	Port int32 `json:"port"`
	// protocol is the transport of the allowed connection.
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
	// maxCount is the most artifacts one run may promote.
	// +required
	MaxCount int32 `json:"maxCount"`
	// maxBytesPer is the largest size in bytes of one promoted artifact.
	// +required
	MaxBytesPer int64 `json:"maxBytesPer"`
	// maxBytesTotal is the most bytes one run may promote across all its artifacts.
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
	// effects names the effects the composed action combines; each needs its class block too.
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
	// signalFamily is the observation signal family recorded on each run (seed 002
	// result_contract.signal_family), for example os/fetch-result.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SignalFamily string `json:"signalFamily,omitempty"`
}

// SigningKeyKind is the kind of key a scoped signer grant uses (seed 002 key_ref.kind).
// +kubebuilder:validation:Enum=primary-participant;proxy;derived
type SigningKeyKind string

// ActionSigning is the seed's optional signing block: a scoped, per-run signer grant. The
// named signer must be the one whose signature authorizes the catalog, domains are
// enumerated and maxSignatures bounds how many signatures one run may request.
type ActionSigning struct {
	// signerRef names the ActionSigner that must have signed the catalog for this grant to
	// be authorized; a catalog signed by any other signer leaves the action Unauthorized.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	SignerRef string `json:"signerRef"`
	// keyKind is the kind of key the grant uses (seed key_ref.kind); primary-participant when unset.
	// +optional
	KeyKind SigningKeyKind `json:"keyKind,omitempty"`
	// allowedDomains are the signing domain tags (for example git.commit.v1) a run may request.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=8
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=128
	AllowedDomains []string `json:"allowedDomains"`
	// maxSignatures bounds the signatures one run may request under this grant.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=16
	MaxSignatures int32 `json:"maxSignatures"`
}

// OutputLimits cap captured output.
type OutputLimits struct {
	// stdoutBytes is the most standard-output bytes captured; output past it is cut and marked
	// truncated.
	// +required
	StdoutBytes int64 `json:"stdoutBytes"`
	// stderrBytes is the most standard-error bytes captured; output past it is cut and marked
	// truncated.
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
	// executable is what the action runs and how its argv is built.
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
	// outputLimits caps the output captured from a run of the action.
	// +required
	OutputLimits OutputLimits `json:"outputLimits"`
	// resultContract is what a run of the action must report as its result.
	// +required
	ResultContract ResultContract `json:"resultContract"`
	// sensitivity may only declare the baseline class ("class", or the legacy alias
	// "default_class"); any override or other key is a structural error.
	// +optional
	// +kubebuilder:validation:MaxProperties=8
	Sensitivity map[string]string `json:"sensitivity,omitempty"`
	// incidentalEffects are effects the action declares beyond its class's baseline (seed
	// connector_incidental_effects); they add to the baseline, never subtract from it.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=63
	IncidentalEffects []string `json:"incidentalEffects,omitempty"`
	// signing is the optional scoped signer grant (seed 002 signing block).
	// +optional
	Signing *ActionSigning `json:"signing,omitempty"`
}

// ActionCatalogSpec is what a signature covers: RFC 8785 canonical JSON of this struct as
// encoded by encoding/json, then sha256.
type ActionCatalogSpec struct {
	// actions are the actions the catalog declares.
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
	// id is the declared action's id in the catalog.
	// +required
	// +kubebuilder:validation:MaxLength=128
	ID string `json:"id"`
	// class is the action's class (C1..C6) as the manager read it.
	// +optional
	Class ActionClass `json:"class,omitempty"`
	// authorization is the manager's authorization verdict for the action.
	// +required
	Authorization ActionAuthorization `json:"authorization"`
	// availability says whether some node can enforce the action's envelope.
	// +required
	Availability ActionAvailability `json:"availability"`
	// code is the refusal code when not authorized or unavailable.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Code string `json:"code,omitempty"`
	// message explains the verdict to an operator.
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
	// observedGeneration is the metadata.generation of the ActionCatalog that this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions report Valid (structure), Authorized (signature).
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
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the ActionCatalog.
	// +required
	Spec ActionCatalogSpec `json:"spec"`
	// signature authorizes spec; outside spec so that writing it leaves the digest alone.
	// +optional
	Signature *CatalogSignature `json:"signature,omitempty"`
	// status is the observed state of the ActionCatalog.
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
// +kubebuilder:validation:XValidation:rule="has(self.signing) == has(oldSelf.signing) && (!has(self.signing) || self.signing == oldSelf.signing)",message="immutable: spec.signing is immutable"
// +kubebuilder:validation:XValidation:rule="has(self.createdBy) == has(oldSelf.createdBy) && (!has(self.createdBy) || self.createdBy == oldSelf.createdBy)",message="immutable: createdBy is stamped at creation"
type ActionRunSpec struct {
	// signing requests signatures under the action's scoped signer grant: one domain the
	// action's signing block allows and at most its maxSignatures.
	// +optional
	Signing *SigningRequest `json:"signing,omitempty"`
	// createdBy is the username that created the run, stamped by the admission webhook from
	// the request (whatever a client sends is overwritten) and immutable. The deny cooldown
	// of a C7 run's consent is kept per createdBy (consent-cooldown).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	CreatedBy string `json:"createdBy,omitempty"`

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
	// timeoutSeconds is the run's time limit in seconds, at most the action's maxTimeoutSeconds; the action's
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
	// path is the file's path relative to the write root.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Path string `json:"path"`
	// size is the file's size in bytes after the run.
	// +required
	Size int64 `json:"size"`
	// digest is the file's content digest after the run.
	// +optional
	Digest Digest `json:"digest,omitempty"`
}

// ConnectionRecord is one connection of a C4 run's network transcript.
type ConnectionRecord struct {
	// host is the destination host of the connection.
	// +required
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`
	// port is the destination port of the connection.
	// +required
	Port int32 `json:"port"`
	// protocol is the transport of the connection.
	// +required
	Protocol EgressProtocol `json:"protocol"`
	// bytesOut is the number of bytes the run sent on the connection.
	// +optional
	BytesOut int64 `json:"bytesOut,omitempty"`
	// bytesIn is the number of bytes the run received on the connection.
	// +optional
	BytesIn int64 `json:"bytesIn,omitempty"`
	// durationMillis is how long the connection was open, in milliseconds.
	// +optional
	DurationMillis int64 `json:"durationMillis,omitempty"`
	// code is the refusal code when the proxy refused or cut the connection (egress-forbidden, a cap).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Code string `json:"code,omitempty"`
}

// ArtifactRef is one promoted C5 artifact.
type ArtifactRef struct {
	// name of the Artifact object.
	// +required
	Name ObjectName `json:"name"`
	// digest is the artifact's content digest.
	// +required
	Digest Digest `json:"digest"`
	// mediaType is the artifact's media type, as the run declared it.
	// +optional
	// +kubebuilder:validation:MaxLength=127
	MediaType string `json:"mediaType,omitempty"`
	// size is the artifact's size in bytes.
	// +optional
	Size int64 `json:"size,omitempty"`
	// role is the artifact's role in the action's result contract.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Role string `json:"role,omitempty"`
}

// SigningRequest is what one run asks of the action's scoped signer grant.
type SigningRequest struct {
	// domain is the signing domain tag requested; it must be one the action allows.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Domain string `json:"domain"`
	// signatures is how many signatures the run requests; above the action's maxSignatures
	// the run is refused (signing-max-signatures-exceeded).
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1024
	Signatures int32 `json:"signatures"`
}

// ActionObservation is the seed's observation of a run: its signal kind and family, the
// sensitivity class attached and the incidental effects, from the catalog (class baseline
// plus declared) and from what the run observed.
type ActionObservation struct {
	// signalKind is the result contract's signal kind.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SignalKind string `json:"signalKind,omitempty"`
	// signalFamily is the result contract's signal family.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	SignalFamily string `json:"signalFamily,omitempty"`
	// sensitivityClass is the effective sensitivity class: the class baseline
	// (operational-sensitive) unless the action raises it.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	SensitivityClass string `json:"sensitivityClass,omitempty"`
	// incidentalEffects is the class baseline, plus the action's declared effects, plus
	// effects the run was observed to have, sorted.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=63
	IncidentalEffects []string `json:"incidentalEffects,omitempty"`
}

// ActionRunStatus: the manager writes admission (Admitted, admission fields, and the
// outcome of a run it refused); the node agent writes execution (Started, Completed,
// exit, capture) of an admitted run. See docs/actions.md.
type ActionRunStatus struct {
	// --- manager (field manager workbench-manager/actionrun) ---

	// phase summarizes the ActionRun's conditions in one word, derived in one place; read the
	// conditions for detail.
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
	// observation is the seed's observation of the run (signal kind and family,
	// sensitivity class, incidental effects): declared at admission, completed by the
	// node with what the run was observed to do.
	// +optional
	Observation *ActionObservation `json:"observation,omitempty"`
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

	// refusal is the stable code and message that refused the ActionRun, when it was refused
	// (codes: docs/vocabulary.md).
	// +optional
	Refusal *Refusal `json:"refusal,omitempty"`
	// completionTime is when the ActionRun reached a final phase.
	// +optional
	CompletionTime *metav1.Time `json:"completionTime,omitempty"`

	// --- node agent (field manager workbench-node-agent/actionrun) ---

	// nodeName is the node whose agent acts on the ActionRun.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`
	// startTime is when the node started the ActionRun.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// exitCode is the process exit code, when the process exited normally.
	// +optional
	ExitCode *int32 `json:"exitCode,omitempty"`
	// signalOrigin says who ended the process by a signal, when one did.
	// +optional
	SignalOrigin SignalOrigin `json:"signalOrigin,omitempty"`
	// stdoutBytes is the number of standard-output bytes captured.
	// +optional
	StdoutBytes int64 `json:"stdoutBytes,omitempty"`
	// stderrBytes is the number of standard-error bytes captured.
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
	// outputDigest is the digest of the captured output.
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

	// observedGeneration is the metadata.generation of the ActionRun that this status was computed
	// from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions report Admitted (manager), Started and Completed (node; manager's Completed only
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
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the ActionRun.
	// +required
	Spec ActionRunSpec `json:"spec"`
	// status is the observed state of the ActionRun.
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

// ActionSignerStatus is written by the manager: the key's fingerprint once it parsed, and
// the kstatus conditions (docs/gitops.md).
type ActionSignerStatus struct {
	// keyID is sha256:<hex> of the raw public key.
	// +optional
	KeyID Digest `json:"keyID,omitempty"`
	// observedGeneration is the metadata.generation of the ActionSigner that this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the ActionSigner's state, one per condition
	// type (Valid, Reconciling, Stalled).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// ActionSigner is a cluster-scoped trusted catalog signer.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=wbsigner,categories=workbench
// +kubebuilder:printcolumn:name="Namespaces",type=string,JSONPath=`.spec.namespaces`
// +kubebuilder:printcolumn:name="Classes",type=string,JSONPath=`.spec.classes`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ActionSigner struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the ActionSigner.
	// +required
	Spec ActionSignerSpec `json:"spec"`
	// status is the observed state of the ActionSigner.
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
	// namespace is the namespace of the catalog that declares the action.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// catalogRef names the ActionCatalog that declares the action.
	// +required
	CatalogRef ObjectName `json:"catalogRef"`
	// actionId is the id of the action, within the catalog, that may run under Emergency posture.
	// +required
	// +kubebuilder:validation:MaxLength=128
	ActionID string `json:"actionId"`
}

// WorkbenchPolicySpec is host policy. A missing policy object means Normal and Strict.
type WorkbenchPolicySpec struct {
	// posture is the cluster-wide actuation posture; Emergency stops every action that has no
	// exception.
	// +optional
	// +kubebuilder:default=Normal
	Posture Posture `json:"posture,omitempty"`
	// emergencyExceptions name actions of C3..C6 that still run under Emergency.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	EmergencyExceptions []EmergencyException `json:"emergencyExceptions,omitempty"`
	// signaturePolicy says how strictly action catalogs must be signed.
	// +optional
	// +kubebuilder:default=Strict
	SignaturePolicy SignaturePolicy `json:"signaturePolicy,omitempty"`
	// consent is the consent policy: which capabilities and profiles may receive remembered
	// grants, and the deny cooldown (see ConsentPolicySpec).
	// +optional
	Consent *ConsentPolicySpec `json:"consent,omitempty"`
}

// WorkbenchPolicyStatus is written by the manager once it observed the policy (the consent
// policy compiled, the posture and signature policy read where used).
type WorkbenchPolicyStatus struct {
	// observedGeneration is the metadata.generation of the WorkbenchPolicy that this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the WorkbenchPolicy's state, one per condition
	// type (Valid, Reconciling, Stalled).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
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
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the WorkbenchPolicy.
	// +optional
	Spec WorkbenchPolicySpec `json:"spec,omitempty"`
	// status is the observed state of the WorkbenchPolicy.
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
