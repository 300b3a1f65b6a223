package v1alpha1

const (
	// NodeLabel binds an object to the node whose agent acts on it. The manager sets it on
	// placement; sessions, commands, waits, probes, patches and artifacts inherit it. Node
	// agents watch only objects carrying their own node's value.
	NodeLabel = "workbench.sensorium.dev/node"

	// CorrelationLabel threads one command through what it caused: the admission webhook
	// keeps the value a client supplies on a TerminalCommand (a label value) or generates
	// one, and the manager copies it onto the command's ConsentRequest and the waits and
	// probes scoped to the command, so `kubectl get waits -l
	// workbench.sensorium.dev/correlation-id=<id>` selects them (issue 30 item 5).
	CorrelationLabel = "workbench.sensorium.dev/correlation-id"
	// EnvironmentLabel names the environment an object acts on (set by the manager).
	EnvironmentLabel = "workbench.sensorium.dev/environment"

	// CommandFinalizer and friends keep objects until their node-side resources are gone.
	CleanupFinalizer = "workbench.sensorium.dev/cleanup"
)

// Common condition types. Conditions are the source of truth; phases are derived from them
// in phases.go and nowhere else.
const (
	ConditionScheduled       = "Scheduled"
	ConditionReady           = "Ready"
	ConditionCleanupComplete = "CleanupComplete"
	ConditionDegraded        = "Degraded"
	ConditionAdmitted        = "Admitted"
	ConditionStarted         = "Started"
	ConditionCompleted       = "Completed"
	ConditionValid           = "Valid"
	ConditionDecided         = "Decided"
	ConditionActive          = "Active"
	ConditionApplied         = "Applied"
	ConditionExpired         = "Expired"
)

// ObjectName is the name of an object in the same namespace.
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=253
// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
type ObjectName string

// RootName names one root of an environment (a DNS-1123 label).
// +kubebuilder:validation:MinLength=1
// +kubebuilder:validation:MaxLength=63
// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
type RootName string

// RelativePath is a root-relative path. Its rules (no traversal, no absolute path, no
// empty or dot components, no backslash or NUL) are enforced by the admission webhooks
// through the actuation core so that refusals carry stable codes.
// +kubebuilder:validation:MaxLength=4096
type RelativePath string

// Digest is a content digest written sha256:<64 lowercase hex digits>.
// +kubebuilder:validation:MaxLength=71
// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
type Digest string

// Refusal is a stable refusal code with a human message.
type Refusal struct {
	// code is one of the closed refusal vocabulary of the actuation core.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Code string `json:"code"`

	// message explains the refusal to a human.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// EnvVar is one environment variable. Keys are checked by the actuation core: loader,
// interpreter-injection, credential-like and agent-socket keys are refused.
type EnvVar struct {
	// name of the variable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// value of the variable; an empty string is an explicit empty value, not an unset.
	// +optional
	// +kubebuilder:validation:MaxLength=32768
	Value string `json:"value"`
}

// CwdAddress addresses a working directory as a root name plus a relative path.
type CwdAddress struct {
	// root is the name of one of the environment's roots.
	// +required
	Root RootName `json:"root"`

	// path beneath the root; empty means the root itself.
	// +optional
	Path RelativePath `json:"path,omitempty"`
}

// Scope names exactly one source that a Wait or Probe observes.
// +kubebuilder:validation:XValidation:rule="[has(self.sessionRef), has(self.commandRef), has(self.environmentRef), has(self.file), has(self.artifactRef), has(self.operationRef)].filter(x, x).size() == 1",message="wait-scope-invalid: exactly one of sessionRef, commandRef, environmentRef, file, artifactRef, operationRef must be set"
type Scope struct {
	// sessionRef names a TerminalSession.
	// +optional
	SessionRef *ObjectName `json:"sessionRef,omitempty"`
	// commandRef names a TerminalCommand.
	// +optional
	CommandRef *ObjectName `json:"commandRef,omitempty"`
	// environmentRef names an Environment.
	// +optional
	EnvironmentRef *ObjectName `json:"environmentRef,omitempty"`
	// file names a path beneath an environment root.
	// +optional
	File *FileRef `json:"file,omitempty"`
	// artifactRef names an Artifact.
	// +optional
	ArtifactRef *ObjectName `json:"artifactRef,omitempty"`
	// operationRef names another Wait, Probe or FilePatch as kind/name.
	// +optional
	// +kubebuilder:validation:MaxLength=317
	// +kubebuilder:validation:Pattern=`^(Wait|Probe|FilePatch|TerminalCommand)/[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	OperationRef *string `json:"operationRef,omitempty"`
}

// FileRef addresses a file beneath a root of an environment.
type FileRef struct {
	// environmentRef names the Environment.
	// +required
	EnvironmentRef ObjectName `json:"environmentRef"`
	// root is the root name.
	// +required
	Root RootName `json:"root"`
	// path beneath the root; a file is required.
	// +required
	Path RelativePath `json:"path"`
}
