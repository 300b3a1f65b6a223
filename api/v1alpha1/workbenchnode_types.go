package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// NodeCaps are the node agent's configured caps.
type NodeCaps struct {
	// sessions is the most terminal sessions the node holds at once.
	// +optional
	Sessions int32 `json:"sessions,omitempty"`
	// sessionsPerEnvironment is the most sessions one environment may have at once.
	// +optional
	SessionsPerEnvironment int32 `json:"sessionsPerEnvironment,omitempty"`
	// readerTasks is the most output reader tasks the node runs at once.
	// +optional
	ReaderTasks int32 `json:"readerTasks,omitempty"`
	// inputQueueDepth is the most input writes a session queues.
	// +optional
	InputQueueDepth int32 `json:"inputQueueDepth,omitempty"`
	// eventBufferDepth is the most output events a session buffers.
	// +optional
	EventBufferDepth int32 `json:"eventBufferDepth,omitempty"`
	// pendingWaits is the most waits the node evaluates at once.
	// +optional
	PendingWaits int32 `json:"pendingWaits,omitempty"`
	// maxCommandTimeoutSeconds is the longest command timeout this node runs; admission
	// refuses longer ones with timeout-above-max (the same ceiling, from one source).
	// +optional
	MaxCommandTimeoutSeconds int64 `json:"maxCommandTimeoutSeconds,omitempty"`
	// maxCommandOutputBytes is the largest command output cap this node accepts
	// (output-cap-above-max above it).
	// +optional
	MaxCommandOutputBytes int64 `json:"maxCommandOutputBytes,omitempty"`
	// maxSessionDurationSeconds is the longest session duration or idle timeout this node
	// accepts (timeout-above-max above it).
	// +optional
	MaxSessionDurationSeconds int64 `json:"maxSessionDurationSeconds,omitempty"`
}

// NodeFree is what one more session, reader, command, wait or VM would find on the node.
type NodeFree struct {
	// sessions is the number of free session slots (caps.sessions minus open sessions).
	// +required
	// +kubebuilder:validation:Minimum=0
	Sessions int32 `json:"sessions"`
	// readerTasks is the number of free reader-task permits (PTY output pumps and event
	// long-polls).
	// +required
	// +kubebuilder:validation:Minimum=0
	ReaderTasks int32 `json:"readerTasks"`
	// commands is the number of free concurrent structured-command slots.
	// +required
	// +kubebuilder:validation:Minimum=0
	Commands int32 `json:"commands"`
	// waits is the number of free pending-wait slots.
	// +required
	// +kubebuilder:validation:Minimum=0
	Waits int32 `json:"waits"`
	// vms is the number of free VM slots (absent when the node offers no VM backend).
	// +optional
	// +kubebuilder:validation:Minimum=0
	VMs *int32 `json:"vms,omitempty"`
	// fullEnvironments are the environments at their per-environment session cap
	// (caps.sessionsPerEnvironment), at most 64.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	FullEnvironments []NodeEnvironmentRef `json:"fullEnvironments,omitempty"`
	// fullEnvironmentsTruncated says more environments are full than fullEnvironments lists.
	// +optional
	FullEnvironmentsTruncated bool `json:"fullEnvironmentsTruncated,omitempty"`
	// observedTime is when the node agent counted.
	// +required
	ObservedTime metav1.Time `json:"observedTime"`
}

// NodeStorage is the node's storage reservation (node-agent config storage.*): every
// fixture-copy.v1 environment's copies live on a disk of its own, and the disks together
// may not exceed capacityMiB (an environment that would overcommit is refused with
// storage-exhausted).
type NodeStorage struct {
	// capacityMiB is the node-wide reservation for environment disks.
	// +required
	// +kubebuilder:validation:Minimum=0
	CapacityMiB int64 `json:"capacityMiB"`
	// usedMiB is the sum of the environment disks that exist now.
	// +required
	// +kubebuilder:validation:Minimum=0
	UsedMiB int64 `json:"usedMiB"`
	// disks is the number of environment disks.
	// +optional
	// +kubebuilder:validation:Minimum=0
	Disks int32 `json:"disks,omitempty"`
	// defaultDiskMiB is the disk of an environment that sets no resources.diskMiB.
	// +optional
	// +kubebuilder:validation:Minimum=0
	DefaultDiskMiB int64 `json:"defaultDiskMiB,omitempty"`
	// tmpMiB bounds each sandbox's private /tmp (a tmpfs).
	// +optional
	// +kubebuilder:validation:Minimum=0
	TmpMiB int64 `json:"tmpMiB,omitempty"`
	// maxFileMiB is RLIMIT_FSIZE of every command and PTY program.
	// +optional
	// +kubebuilder:validation:Minimum=0
	MaxFileMiB int64 `json:"maxFileMiB,omitempty"`
	// unavailable says why this node cannot make environment disks (fixture-copy.v1
	// environments are then refused with resource-not-enforced).
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Unavailable string `json:"unavailable,omitempty"`
}

// NodeEnvironmentRef names an Environment from a cluster-scoped object.
type NodeEnvironmentRef struct {
	// namespace is the Environment's namespace.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Namespace string `json:"namespace"`
	// name is the Environment's name.
	// +required
	Name ObjectName `json:"name"`
}

// AdmittedRoot is a host directory the node's own configuration admits.
type AdmittedRoot struct {
	// name is the root's name, as environments refer to it.
	// +required
	Name RootName `json:"name"`
	// path is the host directory the root maps to.
	// +required
	// +kubebuilder:validation:MaxLength=4096
	Path string `json:"path"`
}

// DataPlane is the node agent's HTTPS endpoint.
type DataPlane struct {
	// endpoint is the node agent's HTTPS address.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Endpoint string `json:"endpoint,omitempty"`
	// caBundle is the PEM CA of the endpoint's serving certificate.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	CABundle string `json:"caBundle,omitempty"`
}

// RecoveryOutcome is what a recovery sweep did with a resource.
// +kubebuilder:validation:Enum=recovered;terminated;quarantined;failed-retryable;failed-permanent;expired;unknown
type RecoveryOutcome string

const (
	// RecoveryOutcomeRecovered: the resource was recovered.
	RecoveryOutcomeRecovered RecoveryOutcome = "recovered"
	// RecoveryOutcomeTerminated: the resource was terminated.
	RecoveryOutcomeTerminated RecoveryOutcome = "terminated"
	// RecoveryOutcomeQuarantined: the resource was quarantined.
	RecoveryOutcomeQuarantined RecoveryOutcome = "quarantined"
	// RecoveryOutcomeFailedRetryable: recovery failed and may be retried.
	RecoveryOutcomeFailedRetryable RecoveryOutcome = "failed-retryable"
	// RecoveryOutcomeFailedPermanent: recovery failed for good.
	RecoveryOutcomeFailedPermanent RecoveryOutcome = "failed-permanent"
	// RecoveryOutcomeExpired: the resource had expired.
	RecoveryOutcomeExpired RecoveryOutcome = "expired"
	// RecoveryOutcomeUnknown: the resource's state is unknown.
	RecoveryOutcomeUnknown RecoveryOutcome = "unknown"
)

// RecoveryAction is one action of a recovery sweep.
type RecoveryAction struct {
	// resource names what the sweep acted on.
	// +required
	// +kubebuilder:validation:MaxLength=512
	Resource string `json:"resource"`
	// outcome is what the sweep did with it.
	// +required
	Outcome RecoveryOutcome `json:"outcome"`
	// message explains the outcome.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
	// time is when the sweep acted.
	// +required
	Time metav1.Time `json:"time"`
}

// ActionClassSupport says whether this node can enforce an action class's envelope.
type ActionClassSupport struct {
	// class is the action class.
	// +required
	Class ActionClass `json:"class"`
	// availability says whether the node can enforce the class's envelope.
	// +required
	Availability ActionAvailability `json:"availability"`
	// code says why not (action-class-unavailable, landlock-unavailable, ...).
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Code string `json:"code,omitempty"`
	// message explains the availability.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// WorkbenchNodeStatus is one node agent's self-report.
type WorkbenchNodeStatus struct {
	// agentVersion is the node agent's version.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	AgentVersion string `json:"agentVersion,omitempty"`
	// heartbeatTime is when the node agent last reported.
	// +optional
	HeartbeatTime *metav1.Time `json:"heartbeatTime,omitempty"`
	// dataPlane is the node agent's HTTPS endpoint.
	// +optional
	DataPlane *DataPlane `json:"dataPlane,omitempty"`
	// caps are the node agent's configured caps.
	// +optional
	Caps *NodeCaps `json:"caps,omitempty"`
	// admittedRoots are the host directories the node's configuration admits.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=map
	// +listMapKey=name
	AdmittedRoots []AdmittedRoot `json:"admittedRoots,omitempty"`
	// activeSessions is the number of sessions the node holds now.
	// +optional
	ActiveSessions int32 `json:"activeSessions,omitempty"`
	// activeWaits is the number of waits the node evaluates now.
	// +optional
	ActiveWaits int32 `json:"activeWaits,omitempty"`
	// free is the node's free capacity, published by the node agent when it changes (at
	// most once per capacityPublishMillis, default 1 s). Admission refuses a session the
	// node would refuse for its caps (session-cap-reached) when free says so; the node
	// stays the authority and still refuses what free could not foresee.
	// +optional
	Free *NodeFree `json:"free,omitempty"`
	// storage is the node's storage reservation for environment disks and the bounds of
	// what a sandboxed program can write.
	// +optional
	Storage *NodeStorage `json:"storage,omitempty"`
	// actionClasses lists, per action class C1..C7, whether this node enforces it (seed
	// 002: a class whose primitive is missing is published unavailable, never weakened).
	// +optional
	// +kubebuilder:validation:MaxItems=7
	// +listType=map
	// +listMapKey=class
	ActionClasses []ActionClassSupport `json:"actionClasses,omitempty"`
	// recovery lists the actions of the last recovery sweep (bounded, newest last).
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	Recovery []RecoveryAction `json:"recovery,omitempty"`
	// conditions are the latest observations of the WorkbenchNode's state, one per condition type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// WorkbenchNode is one node agent's self-report; its name is the node's name.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=wbnode,categories=workbench
// +kubebuilder:printcolumn:name="Version",type=string,JSONPath=`.status.agentVersion`
// +kubebuilder:printcolumn:name="Sessions",type=integer,JSONPath=`.status.activeSessions`
// +kubebuilder:printcolumn:name="Free",type=integer,JSONPath=`.status.free.sessions`
// +kubebuilder:printcolumn:name="Heartbeat",type=date,JSONPath=`.status.heartbeatTime`
type WorkbenchNode struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// status is the observed state of the WorkbenchNode.
	// +optional
	Status WorkbenchNodeStatus `json:"status,omitempty"`
}

// WorkbenchNodeList is a list of WorkbenchNodes.
// +kubebuilder:object:root=true
type WorkbenchNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []WorkbenchNode `json:"items"`
}

func init() { SchemeBuilder.Register(&WorkbenchNode{}, &WorkbenchNodeList{}) }
