package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// EnvMode says how a command's environment is built.
// +kubebuilder:validation:Enum=ProfileDefaultsOnly;AllowlistedOverrides
type EnvMode string

// CwdPolicy says where a command may run.
// +kubebuilder:validation:Enum=RootOnly;BeneathRoot
type CwdPolicy string

// EgressPolicy is the network policy of a profile; only Deny exists for now.
// +kubebuilder:validation:Enum=Deny
type EgressPolicy string

// CredentialPolicy is the credential policy of a profile; only Denied exists for now.
// +kubebuilder:validation:Enum=Denied
type CredentialPolicy string

// PTYPolicy says whether the command may run on a PTY.
// +kubebuilder:validation:Enum=Disabled;Allowed
type PTYPolicy string

// GitMetadataPolicy says whether commands and PTY programs of a profile may write the
// metadata git executes (hooks/, info/, config, commondir of every repository under a
// writable root, and their submodule and worktree equivalents).
// +kubebuilder:validation:Enum=ReadOnly;Writable
type GitMetadataPolicy string

const (
	// GitMetadataReadOnly (the default): that metadata is read-only inside the sandbox and
	// git directories cannot be moved aside.
	GitMetadataReadOnly GitMetadataPolicy = "ReadOnly"
	// GitMetadataWritable: the operator trusts this profile's programs to write what the
	// host's git will execute.
	GitMetadataWritable GitMetadataPolicy = "Writable"
)

// ConsentPrompting says whether an argv this profile does not admit may be put to an operator.
// +kubebuilder:validation:Enum=Allowed;Forbidden
type ConsentPrompting string

const (
	ConsentPromptingAllowed   ConsentPrompting = "Allowed"
	ConsentPromptingForbidden ConsentPrompting = "Forbidden"
)

// CommandEnvPolicy is the curated environment of a profile. Nothing is inherited from the node.
type CommandEnvPolicy struct {
	// mode says whether commands may override listed keys.
	// +optional
	// +kubebuilder:default=ProfileDefaultsOnly
	Mode EnvMode `json:"mode,omitempty"`

	// defaults are set for every command of this profile.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	Defaults []EnvVar `json:"defaults,omitempty"`

	// allowedOverrides are keys a command may set (AllowlistedOverrides mode).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=256
	AllowedOverrides []string `json:"allowedOverrides,omitempty"`
}

// CommandProfileSpec is an allowlisted command shape. Its rules are checked by the actuation
// core in the admission webhook: an absolute executable, no shell or inline-code profile,
// non-empty allowed roots, no forbidden environment keys.
type CommandProfileSpec struct {
	// executable is the absolute path of the program; argv[0] must equal it.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Executable string `json:"executable"`

	// fixedArgs must follow the executable exactly.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=4096
	FixedArgs []string `json:"fixedArgs,omitempty"`

	// allowedArgPrefixes are the prefixes every further argv atom must start with one of these. Empty means
	// no further atoms at all, never any atom.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=4096
	AllowedArgPrefixes []string `json:"allowedArgPrefixes,omitempty"`

	// allowedRoots are the environment root names commands may run in. Empty is an error,
	// never a wildcard.
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=63
	AllowedRoots []string `json:"allowedRoots,omitempty"`

	// cwdPolicy says whether commands run at a root or anywhere beneath it.
	// +optional
	// +kubebuilder:default=BeneathRoot
	CwdPolicy CwdPolicy `json:"cwdPolicy,omitempty"`

	// env is the curated environment.
	// +optional
	Env CommandEnvPolicy `json:"env,omitempty"`

	// egress is the network policy.
	// +optional
	// +kubebuilder:default=Deny
	Egress EgressPolicy `json:"egress,omitempty"`

	// credentials is the credential policy.
	// +optional
	// +kubebuilder:default=Denied
	Credentials CredentialPolicy `json:"credentials,omitempty"`

	// maxTimeoutSeconds caps a command's timeout.
	// +optional
	// +kubebuilder:default=300
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self <= 3600",message="timeout-above-max: at most 3600 seconds, the node ceiling (actuation.MaxCommandTimeoutSeconds)"
	MaxTimeoutSeconds int64 `json:"maxTimeoutSeconds,omitempty"`

	// maxOutputBytes caps a command's combined stdout and stderr.
	// +optional
	// +kubebuilder:default=1048576
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:XValidation:rule="self <= 16777216",message="output-cap-above-max: at most 16777216 bytes, the node ceiling (actuation.MaxCommandOutputBytes)"
	MaxOutputBytes int64 `json:"maxOutputBytes,omitempty"`

	// pty says whether the command may run on a PTY.
	// +optional
	// +kubebuilder:default=Disabled
	PTY PTYPolicy `json:"pty,omitempty"`

	// consentPrompting says whether an argv this profile does not admit is put to an
	// operator (AwaitingConsent) or refused outright (profile-missing).
	// +optional
	// +kubebuilder:default=Allowed
	ConsentPrompting ConsentPrompting `json:"consentPrompting,omitempty"`

	// gitMetadata says whether the profile's programs may write repository metadata the
	// host's git executes (hooks, config, info, commondir) under its writable roots.
	// Operator-owned; shown in consent requests. Default ReadOnly.
	// +optional
	// +kubebuilder:default=ReadOnly
	GitMetadata GitMetadataPolicy `json:"gitMetadata,omitempty"`
}

// ConsentEntry is one argv shape admitted by an active ConsentGrant, with its provenance.
type ConsentEntry struct {
	// grantRef names the ConsentGrant.
	// +required
	GrantRef ObjectName `json:"grantRef"`
	// scope of the grant.
	// +required
	Scope ConsentScope `json:"scope"`
	// argv admitted exactly (remember-exact-argv, allow-once).
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=4096
	Argv []string `json:"argv,omitempty"`
	// prefix admitted (remember-argv-prefix).
	// +optional
	// +kubebuilder:validation:MaxItems=16
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=4096
	Prefix []string `json:"prefix,omitempty"`
	// variablePrefixes admitted after the prefix.
	// +optional
	// +kubebuilder:validation:MaxItems=8
	// +listType=atomic
	// +kubebuilder:validation:items:MaxLength=4096
	VariablePrefixes []string `json:"variablePrefixes,omitempty"`
	// cwd the operator reviewed.
	// +required
	Cwd CwdAddress `json:"cwd"`
	// commandRef is the only command an allow-once grant admits.
	// +optional
	CommandRef ObjectName `json:"commandRef,omitempty"`
	// commandUID is the only command object an allow-once grant admits.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	CommandUID string `json:"commandUID,omitempty"`
	// argvDigest is the argv digest an allow-once grant was reviewed for.
	// +optional
	ArgvDigest Digest `json:"argvDigest,omitempty"`
	// environmentRef is the only environment the grant admits on.
	// +optional
	EnvironmentRef ObjectName `json:"environmentRef,omitempty"`
	// environmentUID is the UID of the Environment object the grant was reviewed on: the
	// node admits with the entry only on that object (a recreated environment of the same
	// name is another one).
	// +optional
	// +kubebuilder:validation:MaxLength=128
	EnvironmentUID string `json:"environmentUID,omitempty"`
	// operationalContext is the operational context the grant was reviewed under: a
	// remembered grant admits only while its environment's context is this class or a
	// lower one.
	// +optional
	OperationalContext ContextClass `json:"operationalContext,omitempty"`
	// deltaDigest of the grant.
	// +required
	DeltaDigest Digest `json:"deltaDigest"`
	// operator who granted it.
	// +required
	// +kubebuilder:validation:MaxLength=512
	Operator string `json:"operator"`
	// expiresAt is when the grant stops being effective.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
}

// Diagnostic is a coded observation about an object, for operators.
type Diagnostic struct {
	// code is the diagnostic's stable code.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Code string `json:"code"`
	// ref names the object or field the diagnostic is about.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Ref string `json:"ref,omitempty"`
	// message explains the diagnostic to an operator.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// CommandProfileStatus is the effective projection of the profile: the spec plus active
// consent-derived entries.
type CommandProfileStatus struct {
	// effectiveDigest covers the spec and every active consent entry.
	// +optional
	EffectiveDigest Digest `json:"effectiveDigest,omitempty"`
	// consentEntries are the active consent-derived argv shapes with provenance.
	// +optional
	// +kubebuilder:validation:MaxItems=256
	// +listType=map
	// +listMapKey=grantRef
	ConsentEntries []ConsentEntry `json:"consentEntries,omitempty"`
	// diagnostics explain grants left out of the projection.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Diagnostics []Diagnostic `json:"diagnostics,omitempty"`
	// observedGeneration is the metadata.generation of the CommandProfile that this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the CommandProfile's state, one per condition
	// type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// CommandProfile is an allowlisted command shape.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbprof,categories=workbench
// +kubebuilder:printcolumn:name="Executable",type=string,JSONPath=`.spec.executable`
// +kubebuilder:printcolumn:name="Digest",type=string,JSONPath=`.status.effectiveDigest`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type CommandProfile struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the CommandProfile.
	// +required
	Spec CommandProfileSpec `json:"spec"`
	// status is the observed state of the CommandProfile.
	// +optional
	Status CommandProfileStatus `json:"status,omitempty"`
}

// CommandProfileList is a list of CommandProfiles.
// +kubebuilder:object:root=true
type CommandProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []CommandProfile `json:"items"`
}

func init() { SchemeBuilder.Register(&CommandProfile{}, &CommandProfileList{}) }
