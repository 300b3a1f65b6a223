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

// Node lifecycle (nodecap): the node is cordoned (kubectl drain) — docs/capacity.md.
const (
	CodeNodeDraining Code = "node-draining" // the node is cordoned: no new session or environment starts until it is uncordoned
)

// allCodes is the closed vocabulary as data; Codes returns a sorted copy.
var allCodes = []Code{
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
	CodeNodeDraining,
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
