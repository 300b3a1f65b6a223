package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Labels and annotations of pool members (docs/pools.md).
const (
	// PoolLabel names the EnvironmentPool an Environment is a member of. The pool controller
	// sets it on the members it creates; a claimed member keeps it until it is deleted.
	PoolLabel = "workbench.sensorium.dev/pool"
	// PoolTemplateLabel is the short digest of the pool template a member was made from.
	PoolTemplateLabel = "workbench.sensorium.dev/pool-template"
	// PoolClaimedByLabel is the UID of the Environment that claimed the member. It is set
	// once, by the manager, under optimistic concurrency (the claim is exactly-once); a
	// claimed member is never handed out again and never (re)allocated by its node.
	PoolClaimedByLabel = "workbench.sensorium.dev/pool-claimed-by"
	// PoolClaimedByAnnotation is the name of the claiming Environment (for people).
	PoolClaimedByAnnotation = "workbench.sensorium.dev/pool-claimed-by-name"
	// PoolFinalizer keeps an EnvironmentPool until its unclaimed members are deleted.
	PoolFinalizer = "workbench.sensorium.dev/pool-members"
)

// PoolUpdateStrategyType says what happens to members made from an older template.
// +kubebuilder:validation:Enum=Recreate;OnDelete
type PoolUpdateStrategyType string

const (
	// PoolUpdateRecreate deletes unclaimed members of an older template (ready or not) and
	// replaces them with members of the current template.
	PoolUpdateRecreate PoolUpdateStrategyType = "Recreate"
	// PoolUpdateOnDelete keeps members of an older template until they are deleted; they
	// are not counted as replicas and are handed out only to claimers whose allocation
	// (backend, requirements, roots, resources, imageRef) they match.
	PoolUpdateOnDelete PoolUpdateStrategyType = "OnDelete"
)

// PoolUpdateStrategy is how a template change reaches existing members.
type PoolUpdateStrategy struct {
	// type of the update strategy.
	// +optional
	// +kubebuilder:default=Recreate
	Type PoolUpdateStrategyType `json:"type,omitempty"`
}

// EnvironmentPoolSpec is the desired pool.
// +kubebuilder:validation:XValidation:rule="!has(self.template.poolRef)",message="pool-template-mismatch: a pool template may not itself name a poolRef"
type EnvironmentPoolSpec struct {
	// template is the Environment spec every member is made from. A claimer's spec must
	// equal it in backend, requirements, roots, resources and imageRef (its allocation);
	// its policy fields (operationalContext, ttlSeconds, teardown, patch policy) are the
	// claimer's own. backend and roots cannot change: make a new pool for that.
	// +required
	Template EnvironmentSpec `json:"template"`

	// replicas is the number of unclaimed, ready members the pool keeps.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=64
	Replicas *int32 `json:"replicas,omitempty"`

	// updateStrategy says how a template change reaches existing members.
	// +optional
	// +kubebuilder:default={type: Recreate}
	UpdateStrategy PoolUpdateStrategy `json:"updateStrategy,omitempty"`
}

// EnvironmentPoolStatus is the observed pool.
type EnvironmentPoolStatus struct {
	// replicas is the number of unclaimed members of the current template (any phase).
	// +optional
	Replicas int32 `json:"replicas"`
	// readyReplicas is the number of those members that are Ready (claimable).
	// +optional
	ReadyReplicas int32 `json:"readyReplicas"`
	// claims counts the members this pool handed out (bound to a claimer) since it was made.
	// +optional
	Claims int64 `json:"claims,omitempty"`
	// templateDigest is the short digest of the current template (the members' label).
	// +optional
	// +kubebuilder:validation:MaxLength=64
	TemplateDigest string `json:"templateDigest,omitempty"`
	// observedGeneration is the metadata.generation of the pool this status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are Ready (readyReplicas == replicas), Reconciling, Stalled (kstatus).
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// EnvironmentPool keeps N Environments from a template allocated and Ready; an Environment
// with spec.poolRef naming it adopts one of them instead of allocating.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbpool,categories=workbench
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.template.backend`
// +kubebuilder:printcolumn:name="Desired",type=integer,JSONPath=`.spec.replicas`
// +kubebuilder:printcolumn:name="Ready",type=integer,JSONPath=`.status.readyReplicas`
// +kubebuilder:printcolumn:name="Claims",type=integer,JSONPath=`.status.claims`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type EnvironmentPool struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the pool.
	// +required
	Spec EnvironmentPoolSpec `json:"spec"`
	// status is the observed state of the pool.
	// +optional
	Status EnvironmentPoolStatus `json:"status,omitempty"`
}

// EnvironmentPoolList is a list of EnvironmentPools.
// +kubebuilder:object:root=true
type EnvironmentPoolList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []EnvironmentPool `json:"items"`
}

// PoolReference names an EnvironmentPool in the Environment's namespace.
type PoolReference struct {
	// name of the EnvironmentPool.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
}

// PoolMemberStatus records the pool member an Environment adopted.
type PoolMemberStatus struct {
	// name of the adopted member Environment (deleted by its pool once the claim is Ready).
	// +required
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`
	// uid of the adopted member: the node agent moves that backend instance to this
	// Environment.
	// +required
	// +kubebuilder:validation:MaxLength=64
	UID string `json:"uid"`
	// sourceGeneration of the member when it was claimed; the claimer's advances past it.
	// +optional
	SourceGeneration int64 `json:"sourceGeneration,omitempty"`
}

func init() { SchemeBuilder.Register(&EnvironmentPool{}, &EnvironmentPoolList{}) }
