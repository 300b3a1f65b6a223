package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// BackendID selects an environment backend implementation. A backend id is never evidence
// of isolation: placement matches the requirements against host-attested capabilities.
// cloud-hypervisor-system.v1 and firecracker-system.v1 are names of the backend port with no
// implementation in this build: admission refuses them (backend-not-offered).
// +kubebuilder:validation:Enum=host-local;fixture-copy.v1;qemu-microvm.v1;cloud-hypervisor-system.v1;vfkit-system.v1;firecracker-system.v1
type BackendID string

const (
	BackendHostLocal       BackendID = "host-local"
	BackendFixtureCopy     BackendID = "fixture-copy.v1"
	BackendQEMUMicroVM     BackendID = "qemu-microvm.v1"
	BackendCloudHypervisor BackendID = "cloud-hypervisor-system.v1"
	BackendVfkit           BackendID = "vfkit-system.v1"
	BackendFirecracker     BackendID = "firecracker-system.v1"
)

// IsolationClass is the closed isolation vocabulary of backend capabilities. emulated-vm
// (a full-system VM under software emulation, TCG) is a revision of the seed vocabulary;
// see docs/vocabulary.md.
// +kubebuilder:validation:Enum=none;process-sandbox;shared-kernel-container;hardware-vm;emulated-vm
type IsolationClass string

// SystemFidelity is the closed fidelity vocabulary of backend capabilities.
// +kubebuilder:validation:Enum=filesystem-view;process-runtime;shared-kernel-linux;full-system-linux
type SystemFidelity string

// NetworkProfile is the closed network vocabulary.
// +kubebuilder:validation:Enum=none;isolated;egress-allowlisted
type NetworkProfile string

// HostFilesystemSharing is the closed host-sharing vocabulary.
// +kubebuilder:validation:Enum=denied;read-only;read-write
type HostFilesystemSharing string

// CredentialInjection is the closed credential vocabulary.
// +kubebuilder:validation:Enum=denied;explicit-scoped
type CredentialInjection string

// ContextClass is the operational impact class of an environment.
// +kubebuilder:validation:Enum=experimental;research;test;production;critical
type ContextClass string

// EnvironmentPhase is a one-word summary derived from conditions.
// +kubebuilder:validation:Enum=Allocating;Ready;Paused;Draining;Closed;Failed;Expired
type EnvironmentPhase string

const (
	EnvironmentAllocating EnvironmentPhase = "Allocating"
	EnvironmentReady      EnvironmentPhase = "Ready"
	// EnvironmentPaused: the environment is held as asked (spec.desiredState Paused); its
	// guest's vCPUs are stopped. Not Ready (it serves no new command or session) and not
	// failed: Reconciling and Stalled are False, and kstatus reads Ready=False as
	// InProgress.
	EnvironmentPaused   EnvironmentPhase = "Paused"
	EnvironmentDraining EnvironmentPhase = "Draining"
	EnvironmentClosed   EnvironmentPhase = "Closed"
	EnvironmentFailed   EnvironmentPhase = "Failed"
	EnvironmentExpired  EnvironmentPhase = "Expired"
)

// EnvironmentDesiredState is what the owner wants of an allocated environment.
// +kubebuilder:validation:Enum=Running;Paused
type EnvironmentDesiredState string

const (
	// EnvironmentDesiredRunning (the default) keeps the environment running.
	EnvironmentDesiredRunning EnvironmentDesiredState = "Running"
	// EnvironmentDesiredPaused stops the environment's guest in place (qemu-microvm.v1: its
	// QEMU process is stopped, memory and devices kept); Running again resumes it (the
	// process continued). A backend that cannot pause refuses with pause-unsupported and
	// keeps running.
	EnvironmentDesiredPaused EnvironmentDesiredState = "Paused"
)

// TeardownPolicy says what teardown removes.
// +kubebuilder:validation:Enum=Delete;RetainArtifacts
type TeardownPolicy string

const (
	// TeardownDelete removes the environment's backend resources and ends the retention of
	// its artifacts (their blobs are removed).
	TeardownDelete TeardownPolicy = "Delete"
	// TeardownRetainArtifacts removes the backend resources and keeps the environment's
	// artifacts until their retainedUntil.
	TeardownRetainArtifacts TeardownPolicy = "RetainArtifacts"
)

// PatchApproval says whether file patches need an operator's approval.
// +kubebuilder:validation:Enum=Required;AutoApply
type PatchApproval string

const (
	PatchApprovalRequired  PatchApproval = "Required"
	PatchApprovalAutoApply PatchApproval = "AutoApply"
)

// PatchPermission grants or withholds one class of patch change.
// +kubebuilder:validation:Enum=Denied;Allowed
type PatchPermission string

const (
	PatchPermissionDenied  PatchPermission = "Denied"
	PatchPermissionAllowed PatchPermission = "Allowed"
)

// EnvironmentPatchPolicy is the host's ceiling on what FilePatches may do in this
// environment. A FilePatch's own spec.policy may narrow it, never widen it: a patch asking
// for a permission withheld here is refused with patch-policy-exceeds-environment. An
// absent patchPolicy means every default below.
type EnvironmentPatchPolicy struct {
	// allowCreate lets patches create files (each patch still asks with spec.policy.allowCreate).
	// +optional
	// +kubebuilder:default=true
	AllowCreate *bool `json:"allowCreate,omitempty"`
	// allowDelete lets patches delete files (each patch still asks with
	// spec.policy.allowDelete); false unless set.
	// +optional
	// +kubebuilder:default=false
	AllowDelete *bool `json:"allowDelete,omitempty"`
	// gitMetadata says whether a patch may touch git metadata. Denied (the default) refuses any patch that creates, modifies or deletes
	// git metadata that runs or redirects code (.git/hooks/*, .git/config, config.worktree,
	// a .git entry itself, the same inside nested repositories) with
	// patch-git-metadata-forbidden.
	// +optional
	// +kubebuilder:default=Denied
	GitMetadata *PatchPermission `json:"gitMetadata,omitempty"`
	// executableFiles says whether a patch may make files executable. Denied (the default) refuses any patch that gives a file an
	// executable bit it did not have (a new file with mode 100755) with
	// patch-executable-forbidden.
	// +optional
	// +kubebuilder:default=Denied
	ExecutableFiles *PatchPermission `json:"executableFiles,omitempty"`
	// maxChangedFiles bounds every patch; a FilePatch asking for more is capped to it.
	// +optional
	// +kubebuilder:default=256
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=256
	MaxChangedFiles *int32 `json:"maxChangedFiles,omitempty"`
}

// EnvironmentRequirements are the properties a backend must attest to host this environment.
// Matching is conjunctive; an unknown or missing capability property never matches.
type EnvironmentRequirements struct {
	// isolationClass is the least isolation the environment needs.
	// +optional
	IsolationClass *IsolationClass `json:"isolationClass,omitempty"`
	// systemFidelity is the least system fidelity the environment needs.
	// +optional
	SystemFidelity *SystemFidelity `json:"systemFidelity,omitempty"`
	// networkProfile is the network profile the environment needs.
	// +optional
	NetworkProfile *NetworkProfile `json:"networkProfile,omitempty"`
	// hostFilesystemSharing is the host file sharing the environment allows.
	// +optional
	HostFilesystemSharing *HostFilesystemSharing `json:"hostFilesystemSharing,omitempty"`
	// credentialInjection is the credential injection the environment allows.
	// +optional
	CredentialInjection *CredentialInjection `json:"credentialInjection,omitempty"`
}

// RootAccess is the access commands and patches have to an environment root.
// +kubebuilder:validation:Enum=ReadOnly;ReadWrite
type RootAccess string

const (
	// RootAccessReadOnly: commands and patches may only read the root.
	RootAccessReadOnly RootAccess = "ReadOnly"
	// RootAccessReadWrite: commands and patches may read and write the root.
	RootAccessReadWrite RootAccess = "ReadWrite"
)

// EnvironmentRoot is one named root of an environment.
// +kubebuilder:validation:XValidation:rule="[has(self.hostPath), has(self.source), has(self.git), has(self.archive), has(self.oci)].filter(x, x).size() <= 1",message="root-invalid: a root has at most one of hostPath, source, git, archive and oci"
type EnvironmentRoot struct {
	// name of the root, used by command cwd addresses and file references.
	// +required
	Name RootName `json:"name"`

	// hostPath is an absolute directory on the node (host-local); it must lie inside a root
	// admitted by the node agent's configuration.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	HostPath *string `json:"hostPath,omitempty"`

	// source is an absolute directory on the node that fixture-copy.v1 copies (bounded,
	// symlink-free) under the agent's state directory; the source is never modified.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Source *string `json:"source,omitempty"`

	// git materializes the root from a git commit, fetched by the node agent (never by the
	// sandbox) into a managed copy (docs/workspace-sources.md).
	// +optional
	Git *GitRootSource `json:"git,omitempty"`

	// archive materializes the root from an uploaded Artifact (tar, tar.gz or zip), extracted
	// by the node agent under the archive rules of docs/workspace-sources.md.
	// +optional
	Archive *ArchiveRootSource `json:"archive,omitempty"`

	// oci materializes the root from an OCI artifact's layers, pulled by the node agent by
	// digest (a tag resolves to a digest recorded in status).
	// +optional
	OCI *OCIRootSource `json:"oci,omitempty"`

	// access to the root for commands and patches.
	// +optional
	// +kubebuilder:default=ReadWrite
	Access *RootAccess `json:"access,omitempty"`
}

// SourceCredentialsLabel must be "true" on a Secret an Environment's source names: the node
// agent reads no other Secret, so naming a Secret in an Environment cannot make the node
// send a credential that was not opted in (docs/workspace-sources.md).
const SourceCredentialsLabel = "workbench.sensorium.dev/source-credentials"

// SecretKeyReference names a Secret in the Environment's namespace. The node agent reads it
// when it fetches; its values are never written into the workspace, the sandbox's
// environment, events, logs or status.
type SecretKeyReference struct {
	// name of the Secret in the Environment's namespace.
	// +required
	Name ObjectName `json:"name"`
}

// GitRootSource is a repository and a commit.
// +kubebuilder:validation:XValidation:rule="has(self.commit) != has(self.ref)",message="root-invalid: a git source has exactly one of commit and ref"
type GitRootSource struct {
	// url of the repository: https://, http:// (loopback or allowlisted only), ssh:// or
	// file:// (operator-allowlisted directories only).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=2048
	URL string `json:"url"`

	// commit is the full commit id (40 or 64 lowercase hex digits) the workspace is checked
	// out at; the checkout's tree is verified against it.
	// +optional
	// +kubebuilder:validation:MaxLength=64
	// +kubebuilder:validation:Pattern=`^([0-9a-f]{40}|[0-9a-f]{64})$`
	Commit *string `json:"commit,omitempty"`

	// ref is a branch or tag, an operator-approved convenience (node policy) that resolves
	// to a commit recorded in status.roots[].resolved. Exactly one of commit and ref is set.
	// +optional
	// +kubebuilder:validation:MaxLength=255
	Ref *string `json:"ref,omitempty"`

	// sparsePaths restricts the checkout to these root-relative directories.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	SparsePaths []RelativePath `json:"sparsePaths,omitempty"`

	// depth of history fetched; absent: the commit alone (depth 1).
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=100000
	Depth *int32 `json:"depth,omitempty"`

	// submodules Fetch checks out the repository's submodules (one level); None (the
	// default) leaves them out.
	// +optional
	Submodules GitSubmodules `json:"submodules,omitempty"`

	// lfs Fetch fetches Git LFS objects; Refuse (the default) refuses a repository that
	// uses LFS.
	// +optional
	LFS GitLFS `json:"lfs,omitempty"`

	// credentialsSecretRef names a Secret holding either `token` (HTTPS) or `ssh-privatekey`
	// with `known_hosts` (SSH, hosts pinned).
	// +optional
	CredentialsSecretRef *SecretKeyReference `json:"credentialsSecretRef,omitempty"`
}

// GitSubmodules says whether a git source's submodules are checked out.
// +kubebuilder:validation:Enum=None;Fetch
type GitSubmodules string

// Submodule policies.
const (
	GitSubmodulesNone  GitSubmodules = "None"
	GitSubmodulesFetch GitSubmodules = "Fetch"
)

// GitLFS says whether a git source's LFS objects are fetched.
// +kubebuilder:validation:Enum=Refuse;Fetch
type GitLFS string

// LFS policies.
const (
	GitLFSRefuse GitLFS = "Refuse"
	GitLFSFetch  GitLFS = "Fetch"
)

// ArchiveFormat names an archive encoding. It is declared or taken from the Artifact, never
// guessed from the content.
// +kubebuilder:validation:Enum=tar;tar+gzip;zip
type ArchiveFormat string

// Archive formats.
const (
	ArchiveFormatTar     ArchiveFormat = "tar"
	ArchiveFormatTarGzip ArchiveFormat = "tar+gzip"
	ArchiveFormatZip     ArchiveFormat = "zip"
)

// ArchiveRootSource is an uploaded Artifact holding an archive.
type ArchiveRootSource struct {
	// artifactRef names the Artifact, in the Environment's namespace, holding the archive.
	// +required
	ArtifactRef ObjectName `json:"artifactRef"`

	// digest pins the archive's content; a different blob is refused.
	// +optional
	Digest *Digest `json:"digest,omitempty"`

	// format of the archive.
	// +required
	Format ArchiveFormat `json:"format"`
}

// OCIRootSource is an OCI artifact or image whose layers form the root.
type OCIRootSource struct {
	// ref is the OCI reference repository@sha256:<digest>, or repository:tag as a
	// convenience that resolves to a digest recorded in status.roots[].resolved.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Ref string `json:"ref"`

	// credentialsSecretRef names a Secret of type kubernetes.io/dockerconfigjson.
	// +optional
	CredentialsSecretRef *SecretKeyReference `json:"credentialsSecretRef,omitempty"`
}

// RootSourceStatus is what the node materialized for one sourced root.
type RootSourceStatus struct {
	// name of the root.
	// +required
	Name RootName `json:"name"`
	// kind of source: git, archive or oci.
	// +required
	// +kubebuilder:validation:Enum=git;archive;oci
	Kind string `json:"kind"`
	// resolved is the commit id (git) or content digest (archive, oci) materialized.
	// +optional
	// +kubebuilder:validation:MaxLength=128
	Resolved string `json:"resolved,omitempty"`
	// bytes materialized into the root.
	// +optional
	Bytes int64 `json:"bytes,omitempty"`
	// entries materialized into the root (files, directories and symlinks).
	// +optional
	Entries int64 `json:"entries,omitempty"`
	// fetchMillis is the time spent fetching the source.
	// +optional
	FetchMillis int64 `json:"fetchMillis,omitempty"`
	// materializeMillis is the time spent checking out or extracting it.
	// +optional
	MaterializeMillis int64 `json:"materializeMillis,omitempty"`
	// reason is the refusal code when the source could not be used.
	// +optional
	// +kubebuilder:validation:MaxLength=63
	Reason string `json:"reason,omitempty"`
}

// EnvironmentResources bound the environment.
type EnvironmentResources struct {
	// vcpus is the number of virtual CPUs the environment gets.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=64
	VCPUs *int32 `json:"vcpus,omitempty"`
	// memoryMiB is the environment's memory, in MiB.
	// +optional
	// +kubebuilder:validation:Minimum=64
	// +kubebuilder:validation:Maximum=262144
	MemoryMiB *int32 `json:"memoryMiB,omitempty"`
	// diskMiB is the environment's disk size, in MiB.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=1048576
	DiskMiB *int32 `json:"diskMiB,omitempty"`
	// pids is the most processes the environment may have at once.
	// +optional
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=65536
	PIDs *int32 `json:"pids,omitempty"`
}

// OperationalContext pins the impact class of this exact environment. Policy may raise it,
// never lower it.
// +kubebuilder:validation:XValidation:rule="!has(self.summary) || bytes(self.summary).size() <= 512",message="summary-too-large: summary must be at most 512 bytes"
type OperationalContext struct {
	// class of operational impact.
	// +required
	Class ContextClass `json:"class"`

	// summary is an untrusted human description, at most 512 bytes.
	// +optional
	// +kubebuilder:validation:MaxLength=512
	Summary *string `json:"summary,omitempty"`
}

// EnvironmentSpec is the desired environment.
// +kubebuilder:validation:XValidation:rule="self.backend == oldSelf.backend && self.roots == oldSelf.roots",message="immutable: backend and roots may not change"
// +kubebuilder:validation:XValidation:rule="has(self.poolRef) == has(oldSelf.poolRef) && (!has(self.poolRef) || self.poolRef == oldSelf.poolRef)",message="immutable: poolRef may not change"
type EnvironmentSpec struct {
	// backend selects the implementation.
	// +required
	Backend BackendID `json:"backend"`

	// requirements are matched conjunctively against host-attested BackendCapability objects.
	// +optional
	Requirements *EnvironmentRequirements `json:"requirements,omitempty"`

	// roots are the named directories of the environment.
	// +required
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=16
	// +listType=map
	// +listMapKey=name
	Roots []EnvironmentRoot `json:"roots"`

	// resources bound the environment (VM backends).
	// +optional
	Resources *EnvironmentResources `json:"resources,omitempty"`

	// operationalContext pins the candidate impact class.
	// +optional
	OperationalContext *OperationalContext `json:"operationalContext,omitempty"`

	// imageRef names an ImageManifest (VM backends).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ImageRef *string `json:"imageRef,omitempty"`

	// nodeSelector restricts placement to nodes with these labels on their BackendCapability.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// ttlSeconds after which the environment expires and is torn down.
	// +optional
	// +kubebuilder:validation:Minimum=60
	// +kubebuilder:validation:Maximum=2592000
	TTLSeconds *int64 `json:"ttlSeconds,omitempty"`

	// teardown says what teardown removes.
	// +optional
	// +kubebuilder:default=Delete
	Teardown *TeardownPolicy `json:"teardown,omitempty"`

	// patchApproval says whether FilePatches on this environment wait for an operator.
	// +optional
	// +kubebuilder:default=Required
	PatchApproval *PatchApproval `json:"patchApproval,omitempty"`

	// patchPolicy is the host-owned ceiling on what FilePatches may do here (creates,
	// deletes, git metadata, executable bits, file count). Absent: the safe defaults.
	// +optional
	PatchPolicy *EnvironmentPatchPolicy `json:"patchPolicy,omitempty"`

	// poolRef names an EnvironmentPool in this namespace: the environment adopts one of its
	// Ready members (docs/pools.md) instead of allocating, and allocates normally when none
	// is ready. Its allocation fields must equal the pool template's.
	// +optional
	PoolRef *PoolReference `json:"poolRef,omitempty"`

	// desiredState Paused stops the environment's guest in place and Running (the default)
	// resumes it (docs/vm-pause-snapshot.md). While Paused, new commands and sessions are
	// refused with environment-paused; running ones are frozen with the guest.
	// +optional
	// +kubebuilder:default=Running
	DesiredState EnvironmentDesiredState `json:"desiredState,omitempty"`

	// recording caps the workspace state hash a Recording or SkillReplay computes on this
	// environment (recording_limits_types.go); absent fields take the node's defaults.
	// +optional
	Recording *EnvironmentRecordingLimits `json:"recording,omitempty"`
}

// UnmetRequirement is one property no capability satisfied.
type UnmetRequirement struct {
	// dimension names the requirement no capability satisfied.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Dimension string `json:"dimension"`
	// want is the value the environment asked for.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Want string `json:"want"`
}

// EnvironmentStatus is the observed environment.
type EnvironmentStatus struct {
	// phase summarizes the Environment's conditions in one word, derived in one place; read the
	// conditions for detail.
	// +optional
	Phase EnvironmentPhase `json:"phase,omitempty"`
	// nodeName is the node whose agent acts on the Environment.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	NodeName string `json:"nodeName,omitempty"`
	// sourceGeneration advances on every new boot or reallocation.
	// +optional
	SourceGeneration int64 `json:"sourceGeneration,omitempty"`
	// planDigest is the digest of the plan the environment was placed with.
	// +optional
	PlanDigest Digest `json:"planDigest,omitempty"`
	// capabilityRef names the BackendCapability the environment was placed on.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	CapabilityRef string `json:"capabilityRef,omitempty"`
	// effectiveOperationalContext is the operational context the environment runs under now.
	// +optional
	EffectiveOperationalContext ContextClass `json:"effectiveOperationalContext,omitempty"`
	// unmet lists the requirements that no candidate capability satisfied.
	// +optional
	// +kubebuilder:validation:MaxItems=32
	// +listType=atomic
	Unmet []UnmetRequirement `json:"unmet,omitempty"`
	// poolMember is the pool member this environment adopted (spec.poolRef), set by the
	// manager when it claims one.
	// +optional
	PoolMember *PoolMemberStatus `json:"poolMember,omitempty"`
	// roots reports each sourced root's materialization (spec.roots[].git/archive/oci).
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	Roots []RootSourceStatus `json:"roots,omitempty"`
	// observedGeneration is the metadata.generation of the Environment that this status was
	// computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// conditions are the latest observations of the Environment's state, one per condition type.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=16
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// Environment is a workspace or sandbox on one node.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=wbenv,categories=workbench
// +kubebuilder:printcolumn:name="Backend",type=string,JSONPath=`.spec.backend`
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Node",type=string,JSONPath=`.status.nodeName`
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type Environment struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`
	// spec is the desired state of the Environment.
	// +required
	Spec EnvironmentSpec `json:"spec"`
	// status is the observed state of the Environment.
	// +optional
	Status EnvironmentStatus `json:"status,omitempty"`
}

// EnvironmentList is a list of Environments.
// +kubebuilder:object:root=true
type EnvironmentList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Environment `json:"items"`
}

func init() { SchemeBuilder.Register(&Environment{}, &EnvironmentList{}) }
