package actuation

import (
	"fmt"
	"slices"
)

// Code is a stable refusal code. The set of codes is closed: callers and
// dashboards branch on these values, and a new code is an API change.
type Code string

// The closed vocabulary of refusal codes.
const (
	// Paths (seed 000 §6, adversarial matrix "path validation").
	CodePathEmpty            Code = "path-empty"
	CodePathAbsolute         Code = "path-absolute"
	CodePathTraversal        Code = "path-traversal"
	CodePathInvalidComponent Code = "path-invalid-component" // ".", empty component, trailing slash
	CodePathInvalidCharacter Code = "path-invalid-character" // backslash, NUL, control chars, invalid UTF-8
	CodePathTooLong          Code = "path-too-long"
	CodeSymlinkEscape        Code = "symlink-escape"
	CodeRootNotAllowed       Code = "root-not-allowed"

	// Command profiles and intents.
	CodeExecutableNotAbsolute Code = "executable-not-absolute"
	CodeShellString           Code = "shell-string"
	CodeProfileInvalid        Code = "profile-invalid"
	CodeProfileRootsEmpty     Code = "profile-roots-empty"
	CodeProfileMissing        Code = "profile-missing"
	CodeArgvInvalid           Code = "argv-invalid"
	CodeArgvNotAdmitted       Code = "argv-not-admitted"
	CodeCwdNotAllowed         Code = "cwd-not-allowed"
	CodeEnvKeyInvalid         Code = "env-key-invalid"
	CodeEnvKeyForbidden       Code = "env-key-forbidden"
	CodeEnvValueInvalid       Code = "env-value-invalid"
	CodeEnvOverrideNotAllowed Code = "env-override-not-allowed"
	CodeEgressForbidden       Code = "egress-forbidden"
	CodeCredentialsForbidden  Code = "credentials-forbidden"
	CodeTimeoutAboveMax       Code = "timeout-above-max"
	CodeTimeoutInvalid        Code = "timeout-invalid" // zero or negative timeout
	CodeOutputCapAboveMax     Code = "output-cap-above-max"
	CodeOutputCapInvalid      Code = "output-cap-invalid" // zero or negative output cap

	// Runtime caps (node agent).
	CodeSessionCapReached Code = "session-cap-reached"
	CodeReaderCapReached  Code = "reader-cap-reached"
	CodeQueueFull         Code = "queue-full"
	CodeEventBufferFull   Code = "event-buffer-full"

	// Operator consent.
	CodeConsentRequired                Code = "consent-required"
	CodeConsentDenied                  Code = "consent-denied"
	CodeConsentExpired                 Code = "consent-expired"
	CodeConsentRevoked                 Code = "consent-revoked"
	CodeConsentScopeInvalid            Code = "consent-scope-invalid"
	CodeConsentPrefixTooBroad          Code = "consent-prefix-too-broad"
	CodeConsentOperatorBindingInactive Code = "consent-operator-binding-inactive"
	CodeConsentCapabilityNotGrantable  Code = "consent-capability-not-grantable"
	CodeConsentNotOperator             Code = "consent-not-operator"

	// Closed vocabularies, capability admission and plans.
	CodeVocabularyUnknown  Code = "vocabulary-unknown"
	CodeCapabilityMismatch Code = "capability-mismatch"
	CodePolicyInvalid      Code = "policy-invalid" // malformed host policy (equivalence sets)

	// Operational context, waits, objects.
	CodeSummaryTooLarge  Code = "summary-too-large"
	CodeDeadlineAboveMax Code = "deadline-above-max"
	CodeWaitScopeInvalid Code = "wait-scope-invalid"
	CodeNodeRestricted   Code = "node-restricted"
	CodeImmutable        Code = "immutable"

	// Artifacts and patches.
	CodeDigestMismatch       Code = "digest-mismatch"
	CodePatchOutsideRoot     Code = "patch-outside-root"
	CodePatchDirty           Code = "patch-dirty"
	CodePatchDeleteForbidden Code = "patch-delete-forbidden"
	CodePatchTooManyFiles    Code = "patch-too-many-files"
	CodePatchCreateForbidden Code = "patch-create-forbidden"

	// Workspace hygiene (issue 7 item 3): what a patch may touch, capped by the
	// environment's host-owned spec.patchPolicy, and the identity of its roots.
	CodePatchGitMetadataForbidden     Code = "patch-git-metadata-forbidden"     // .git/hooks/*, .git/config, a .git file, unless the environment allows it
	CodePatchExecutableForbidden      Code = "patch-executable-forbidden"       // a patch setting an executable bit, unless the environment allows it
	CodePatchPolicyExceedsEnvironment Code = "patch-policy-exceeds-environment" // a FilePatch's policy asks for more than its environment allows
	CodeRootOverlap                   Code = "root-overlap"                     // two roots of an environment are nested or the same directory
	CodeRootChanged                   Code = "root-changed"                     // a root's directory is no longer the one opened at allocation

	// Lifecycle.
	CodeInterrupted Code = "interrupted"

	// Object references and shapes checked by the admission webhooks and controllers.
	CodeRootInvalid              Code = "root-invalid"            // an environment root's host directory or source
	CodePatchInvalid             Code = "patch-invalid"           // a structured patch operation without content
	CodeSessionMissing           Code = "session-missing"         // a command names a session that does not exist
	CodeEnvironmentUnavailable   Code = "environment-unavailable" // missing, failed, expired, draining or closed
	CodeSessionClosed            Code = "session-closed"          // a command names a session that has ended
	CodeRootNotAdmitted          Code = "root-not-admitted"       // a host directory outside the node's admitted roots
	CodeNoPTY                    Code = "no-pty"                  // raw input to a session without a PTY program
	CodeWatchUnavailable         Code = "watch-unavailable"       // the kernel refused a file watch (no polling fallback)
	CodeWatchCapReached          Code = "watch-cap-reached"       // too many file watches
	CodeLandlockUnavailable      Code = "landlock-unavailable"    // the kernel cannot confine writes: fail closed
	CodeUserNamespaceUnavailable Code = "userns-unavailable"      // no user/PID/mount namespaces for the sandbox: fail closed
	CodeIdmapUnavailable         Code = "idmap-unavailable"       // no idmapped mounts for the sandbox's roots: fail closed
	CodeSeccompUnavailable       Code = "seccomp-unavailable"     // the sandbox's seccomp filter cannot be built or installed: fail closed

	// Node agent runtime (processes, PTYs, waits).
	CodeInputTooLarge        Code = "input-too-large"       // one raw input write above the per-write cap
	CodeCommandCapReached    Code = "command-cap-reached"   // concurrent structured commands at the node cap
	CodeInvalidSpec          Code = "invalid-spec"          // a malformed runtime request
	CodeSessionExists        Code = "session-exists"        // a session ID registered twice
	CodeSessionNotRunning    Code = "session-not-running"   // input, resize or signal to a session that ended
	CodeSandboxSetupFailed   Code = "sandbox-setup-failed"  // isolation could not be established: nothing ran
	CodeCleanupIncomplete    Code = "cleanup-incomplete"    // processes of the group may remain
	CodeCgroupUnavailable    Code = "cgroup-unavailable"    // a required cgroup controller is missing or the group could not be made: nothing ran
	CodeStartFailed          Code = "start-failed"          // the program could not be started
	CodeSourceFailed         Code = "source-failed"         // a wait's observed source failed
	CodeConditionUnreachable Code = "condition-unreachable" // a wait's condition can no longer hold
	CodeProbeTimedOut        Code = "probe-timed-out"       // a probe did not finish within its timeout

	// VM backends (qemu-microvm.v1): the host broker's refusals.
	CodeImageInvalid         Code = "image-invalid"          // no boot image, a path outside the node's image dir, a missing or oversized file
	CodeResourcesAboveMax    Code = "resources-above-max"    // vCPUs or memory above the node's per-VM bounds
	CodeResourcesInvalid     Code = "resources-invalid"      // vCPUs or memory below what a guest needs
	CodeResourceNotEnforced  Code = "resource-not-enforced"  // a resource limit the backend cannot enforce (refused, never ignored)
	CodeVMCapReached         Code = "vm-cap-reached"         // the node runs its maximum number of VMs
	CodeBootFailed           Code = "boot-failed"            // the VMM or vsock device exited, or the guest refused the boot's binding
	CodeBootTimeout          Code = "boot-timeout"           // no guest handshake within the boot timeout
	CodeVMNotRunning         Code = "vm-not-running"         // no running VM for the environment on this node
	CodeEnvironmentIDInvalid Code = "environment-id-invalid" // an environment ID unusable as a directory name
	CodeStateDirTooLong      Code = "state-dir-too-long"     // a VM's socket paths would exceed the Unix socket limit
)

// Codes of the aggregated subresource API (workbench-apiserver) and the node data plane.
const (
	CodeForwardingRefused Code = "forwarding-refused" // identity headers from a peer that is not the aggregated API server
	CodeNodeUnreachable   Code = "node-unreachable"   // the object's node publishes no data plane, or it does not answer
	CodeOutputEvicted     Code = "output-evicted"     // the command's output left the node's bounded event ring
	CodeUploadTooLarge    Code = "upload-too-large"   // an artifact upload above the cap
	CodeRawInputDisabled  Code = "raw-input-disabled" // attach with stdin on a session whose spec.rawInput is not OperatorOnly
)

// Shared read-only terminal views (issue 11, seed 003): TerminalView and ViewGrant, the
// dual authority checked for every frame, and context replacement.
const (
	CodeViewGrantMissing           Code = "view-grant-missing"           // no ViewGrant names the observer for this view
	CodeViewGrantRevoked           Code = "view-grant-revoked"           // the observer's grant was revoked
	CodeViewGrantExpired           Code = "view-grant-expired"           // the observer's grant passed its expiresAt
	CodeViewMembershipInactive     Code = "view-membership-inactive"     // RBAC no longer allows get on terminalviews/stream
	CodeViewContextSuperseded      Code = "view-context-superseded"      // the environment was replaced, re-generated or its context changed: grant again on a new view
	CodeViewContextMissing         Code = "view-context-missing"         // the environment has no operational context: a view fails closed
	CodeViewClassificationExceeded Code = "view-classification-exceeded" // the environment's context is above the view's classification ceiling
	CodeViewSessionUnavailable     Code = "view-session-unavailable"     // the view's session is not open on its node (e.g. swept after an agent restart)
	CodeViewGrantLifetimeInvalid   Code = "view-grant-lifetime-invalid"  // expiresAt in the past or beyond the maximum grant lifetime
	CodeViewGrantNotAuthorized     Code = "view-grant-not-authorized"    // the requester may not use the virtual verb grant on terminalviews
	CodeViewSubjectInvalid         Code = "view-subject-invalid"         // a grant subject that is not exactly one user, group or ServiceAccount
)

// Codes of the node's action-class enforcement (issue 10, node half: seed 002's C3
// scoped writes, C4 egress, C5 artifacts). The seed's own sensorium-os-error-codes.v1
// vocabulary is declared with the action kinds; these name what the node's envelopes
// stop while a program runs.
const (
	CodeEgressEndpointForbidden    Code = "egress-endpoint-forbidden"     // a connection to a (host, port, protocol) the action does not declare
	CodeEgressDNSNameForbidden     Code = "egress-dns-name-forbidden"     // a DNS question for a name the action does not declare (NXDOMAIN)
	CodeEgressConnectionCapReached Code = "egress-connection-cap-reached" // too many concurrent connections through the egress proxy
	CodeEgressByteCapReached       Code = "egress-byte-cap-reached"       // a connection reached its byte cap and was cut
	CodeEgressTotalByteCapReached  Code = "egress-total-byte-cap-reached" // the action's egress reached its total byte cap: cut
	CodeEgressProtocolMismatch     Code = "egress-protocol-mismatch"      // the first bytes do not match the endpoint's declared protocol
	CodeEgressProtocolUnsupported  Code = "egress-protocol-unsupported"   // an endpoint protocol the node cannot carry (udp): fail closed
	CodeEgressDialFailed           Code = "egress-dial-failed"            // the declared endpoint could not be reached from the node
	CodeWriteTotalCapReached       Code = "write-total-cap-reached"       // the write root's byte cap was reached (ENOSPC while writing)
	CodeWriteFileCapReached        Code = "write-file-cap-reached"        // a file reached the per-file byte cap (EFBIG while writing)
	CodeWriteFileCountCapReached   Code = "write-file-count-cap-reached"  // the write root's file count cap was reached
	CodeWritePathForbidden         Code = "write-path-forbidden"          // a written path outside the declared path pattern: nothing committed
	CodeWriteKindForbidden         Code = "write-kind-forbidden"          // a symlink, device, fifo or socket in the write root: nothing committed
	CodeArtifactMediaTypeForbidden Code = "artifact-media-type-forbidden" // a produced artifact's sniffed media type is not declared
	CodeArtifactCountCapReached    Code = "artifact-count-cap-reached"    // more artifacts than the declared count
	CodeArtifactSizeCapReached     Code = "artifact-size-cap-reached"     // an artifact above the per-artifact byte cap
	CodeArtifactTotalCapReached    Code = "artifact-total-cap-reached"    // the artifact directory reached its total byte cap
)

// Codes of recordings, skills, replays and skill bundles (seed 004, internal/skills).
const (
	CodeStateTreeTooLarge     Code = "state-tree-too-large"    // a workspace state over the entry or byte cap: no partial hash is claimed
	CodeTraceTooLarge         Code = "trace-too-large"         // a trace over its edge or change caps
	CodeTraceInvalid          Code = "trace-invalid"           // a trace with missing hashes, gaps in its sequence or unknown kinds
	CodeRecordingConflict     Code = "recording-conflict"      // a second active Recording for the same environment
	CodeSkillInvalid          Code = "skill-invalid"           // a manifest that does not validate
	CodeSkillParameterMissing Code = "skill-parameter-missing" // a replay without a value for a declared parameter
	CodeSkillParameterUnknown Code = "skill-parameter-unknown" // a replay or crystallize naming an undeclared or unused parameter
	CodeSkillParameterInvalid Code = "skill-parameter-invalid" // a parameter name or value outside its bounds
	CodeCapabilityUndeclared  Code = "capability-undeclared"   // a replay step needs a profile, action or backend the manifest does not declare
	CodeStateDiverged         Code = "state-diverged"          // replay halted: the observed state or outcome differs from the recorded one
	CodeBundleHashMismatch    Code = "bundle-hash-mismatch"    // an imported bundle whose contentHash does not recompute
	CodeBundleSchemaInvalid   Code = "bundle-schema-invalid"   // an imported bundle that does not validate
	CodeBundleTooLarge        Code = "bundle-too-large"        // a bundle over the size cap
	CodeSecretDetected        Code = "secret-detected"         // export with redaction none while a secret pattern is found, without override
)

// allCodes is the closed vocabulary as data; Codes returns a sorted copy.
var allCodes = []Code{
	CodeEgressEndpointForbidden, CodeEgressDNSNameForbidden, CodeEgressConnectionCapReached,
	CodeEgressByteCapReached, CodeEgressTotalByteCapReached, CodeEgressProtocolMismatch,
	CodeEgressProtocolUnsupported, CodeEgressDialFailed,
	CodeWriteTotalCapReached, CodeWriteFileCapReached, CodeWriteFileCountCapReached,
	CodeWritePathForbidden, CodeWriteKindForbidden,
	CodeArtifactMediaTypeForbidden, CodeArtifactCountCapReached, CodeArtifactSizeCapReached,
	CodeArtifactTotalCapReached,
	CodePathEmpty, CodePathAbsolute, CodePathTraversal, CodePathInvalidComponent,
	CodePathInvalidCharacter, CodePathTooLong, CodeSymlinkEscape, CodeRootNotAllowed,
	CodeExecutableNotAbsolute, CodeShellString, CodeProfileInvalid, CodeProfileRootsEmpty,
	CodeProfileMissing, CodeArgvInvalid, CodeArgvNotAdmitted, CodeCwdNotAllowed,
	CodeEnvKeyInvalid, CodeEnvKeyForbidden, CodeEnvValueInvalid, CodeEnvOverrideNotAllowed,
	CodeEgressForbidden, CodeCredentialsForbidden, CodeTimeoutAboveMax, CodeTimeoutInvalid,
	CodeOutputCapAboveMax, CodeOutputCapInvalid,
	CodeSessionCapReached, CodeReaderCapReached, CodeQueueFull, CodeEventBufferFull,
	CodeConsentRequired, CodeConsentDenied, CodeConsentExpired, CodeConsentRevoked,
	CodeConsentScopeInvalid, CodeConsentPrefixTooBroad, CodeConsentOperatorBindingInactive,
	CodeConsentCapabilityNotGrantable, CodeConsentNotOperator,
	CodeVocabularyUnknown, CodeCapabilityMismatch, CodePolicyInvalid,
	CodeSummaryTooLarge, CodeDeadlineAboveMax, CodeWaitScopeInvalid, CodeNodeRestricted, CodeImmutable,
	CodeDigestMismatch, CodePatchOutsideRoot, CodePatchDirty, CodePatchDeleteForbidden,
	CodePatchTooManyFiles, CodePatchCreateForbidden,
	CodePatchGitMetadataForbidden, CodePatchExecutableForbidden, CodePatchPolicyExceedsEnvironment,
	CodeRootOverlap, CodeRootChanged,
	CodeInterrupted,
	CodeRootInvalid, CodePatchInvalid, CodeSessionMissing, CodeEnvironmentUnavailable,
	CodeSessionClosed, CodeRootNotAdmitted, CodeNoPTY, CodeWatchUnavailable, CodeWatchCapReached, CodeLandlockUnavailable,
	CodeUserNamespaceUnavailable, CodeIdmapUnavailable, CodeSeccompUnavailable,
	CodeInputTooLarge, CodeCommandCapReached, CodeInvalidSpec, CodeSessionExists, CodeSessionNotRunning,
	CodeSandboxSetupFailed, CodeCleanupIncomplete, CodeCgroupUnavailable, CodeStartFailed, CodeSourceFailed, CodeConditionUnreachable, CodeProbeTimedOut,
	CodeImageInvalid, CodeResourcesAboveMax, CodeResourcesInvalid, CodeResourceNotEnforced, CodeVMCapReached, CodeBootFailed, CodeBootTimeout,
	CodeVMNotRunning, CodeEnvironmentIDInvalid, CodeStateDirTooLong,
	CodeForwardingRefused, CodeNodeUnreachable, CodeOutputEvicted, CodeUploadTooLarge, CodeRawInputDisabled,
	// views (issue 11)
	CodeViewGrantMissing, CodeViewGrantRevoked, CodeViewGrantExpired, CodeViewMembershipInactive,
	CodeViewContextSuperseded, CodeViewContextMissing, CodeViewClassificationExceeded, CodeViewSessionUnavailable,
	CodeViewGrantLifetimeInvalid, CodeViewGrantNotAuthorized, CodeViewSubjectInvalid,
	// seed 004
	CodeStateTreeTooLarge, CodeTraceTooLarge, CodeTraceInvalid, CodeRecordingConflict, CodeSkillInvalid,
	CodeSkillParameterMissing, CodeSkillParameterUnknown, CodeSkillParameterInvalid, CodeCapabilityUndeclared,
	CodeStateDiverged, CodeBundleHashMismatch, CodeBundleSchemaInvalid, CodeBundleTooLarge, CodeSecretDetected,
}

var sortedCodes = func() []Code {
	c := slices.Clone(allCodes)
	slices.Sort(c)
	return slices.Compact(c)
}()

// Codes returns every refusal code of the closed vocabulary, sorted.
func Codes() []Code { return slices.Clone(sortedCodes) }

// IsKnownCode reports whether c belongs to the closed vocabulary.
func IsKnownCode(c Code) bool {
	_, found := slices.BinarySearch(sortedCodes, c)
	return found
}

// Refusal is one refused rule: a stable Code, the Field it concerns (a
// JSON-ish path such as "spec.argv[2]", possibly empty) and a human Message
// written with "must" / "must not".
type Refusal struct {
	Code    Code   `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
}

// Error renders "<code>: <field>: <message>", omitting the field part when
// Field is empty.
func (r *Refusal) Error() string {
	if r == nil {
		return "<nil refusal>"
	}
	if r.Field == "" {
		return string(r.Code) + ": " + r.Message
	}
	return string(r.Code) + ": " + r.Field + ": " + r.Message
}

// Err returns r as an error, or a nil error when r is nil. Use it instead of
// assigning a possibly nil *Refusal to an error variable.
func (r *Refusal) Err() error {
	if r == nil {
		return nil
	}
	return r
}

// Refuse builds a Refusal; the message is fmt.Sprintf(format, args...).
func Refuse(code Code, field, format string, args ...any) *Refusal {
	return &Refusal{Code: code, Field: field, Message: fmt.Sprintf(format, args...)}
}

// FirstRefusal returns the first refusal of rs, or nil when rs is empty.
func FirstRefusal(rs []*Refusal) *Refusal {
	if len(rs) == 0 {
		return nil
	}
	return rs[0]
}

// field helpers keep refusal field paths uniform.
func fieldIndex(base string, i int) string { return fmt.Sprintf("%s[%d]", base, i) }

func fieldJoin(base, name string) string {
	if base == "" {
		return name
	}
	return base + "." + name
}
