package actuation

//go:generate go run sensorium.dev/workbench/hack/gen-vocabulary -actuation . -doc ../../docs/vocabulary.md

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
	CodePathEmpty            Code = "path-empty"             // the root itself where a file is required
	CodePathAbsolute         Code = "path-absolute"          // a path that starts with "/"
	CodePathTraversal        Code = "path-traversal"         // a ".." component anywhere
	CodePathInvalidComponent Code = "path-invalid-component" // ".", empty component, trailing slash
	CodePathInvalidCharacter Code = "path-invalid-character" // backslash, NUL, control chars, invalid UTF-8
	CodePathTooLong          Code = "path-too-long"          // a path above 4096 bytes or a component above 255
	CodeSymlinkEscape        Code = "symlink-escape"         // a path that resolves outside its root (openat2 RESOLVE_BENEATH)
	CodeRootNotAllowed       Code = "root-not-allowed"       // a root the profile or environment does not name

	// Command profiles and intents.
	CodeExecutableNotAbsolute Code = "executable-not-absolute"  // argv[0] is not an absolute path
	CodeShellString           Code = "shell-string"             // a shell interpreter with a command string (argv is data, not a script)
	CodeProfileInvalid        Code = "profile-invalid"          // a malformed CommandProfile (or root name)
	CodeProfileRootsEmpty     Code = "profile-roots-empty"      // a profile without roots
	CodeProfileMissing        Code = "profile-missing"          // the command names no profile, or one that does not exist
	CodeArgvInvalid           Code = "argv-invalid"             // an empty argv, too many or too long arguments, NUL bytes
	CodeArgvNotAdmitted       Code = "argv-not-admitted"        // an argument the profile does not admit
	CodeCwdNotAllowed         Code = "cwd-not-allowed"          // a working directory outside the profile's roots, or one that does not exist
	CodeEnvKeyInvalid         Code = "env-key-invalid"          // a malformed environment variable name
	CodeEnvKeyForbidden       Code = "env-key-forbidden"        // an environment variable that changes how programs load or run (LD_*, BASH_ENV, ...)
	CodeEnvValueInvalid       Code = "env-value-invalid"        // a malformed or oversized environment variable value
	CodeEnvOverrideNotAllowed Code = "env-override-not-allowed" // an environment variable the profile does not let a command set
	CodeEgressForbidden       Code = "egress-forbidden"         // network access the profile does not grant, or isolation that cannot be set up
	CodeCredentialsForbidden  Code = "credentials-forbidden"    // credentials the profile does not grant
	CodeTimeoutAboveMax       Code = "timeout-above-max"        // a timeout (or grace, idle window, duration) above the ceiling
	CodeTimeoutInvalid        Code = "timeout-invalid"          // zero or negative timeout
	CodeOutputCapAboveMax     Code = "output-cap-above-max"     // an output cap above the ceiling
	CodeOutputCapInvalid      Code = "output-cap-invalid"       // zero or negative output cap

	// Runtime caps (node agent).
	CodeSessionCapReached Code = "session-cap-reached" // the node or environment runs its maximum number of sessions
	CodeReaderCapReached  Code = "reader-cap-reached"  // no reader permit is free (output pumps and long-polls share them)
	CodeQueueFull         Code = "queue-full"          // a bounded queue (input, requests in flight) is full
	CodeShareCapReached   Code = "share-cap-reached"   // an identity or identity class holds its share of a node-wide cap (a reserve stays for operators)
	CodeEventBufferFull   Code = "event-buffer-full"   // an event larger than the buffer, or a depth above the node cap

	// Operator consent.
	CodeConsentRequired                Code = "consent-required"                  // the action needs operator consent that has not been granted
	CodeConsentDenied                  Code = "consent-denied"                    // an operator denied the consent request
	CodeConsentExpired                 Code = "consent-expired"                   // the consent grant has expired
	CodeConsentRevoked                 Code = "consent-revoked"                   // the consent grant was revoked
	CodeConsentScopeInvalid            Code = "consent-scope-invalid"             // a consent scope that is malformed or does not cover the action
	CodeConsentPrefixTooBroad          Code = "consent-prefix-too-broad"          // a consent argv prefix broader than allowed
	CodeConsentOperatorBindingInactive Code = "consent-operator-binding-inactive" // the granting operator's binding is not active
	CodeConsentCapabilityNotGrantable  Code = "consent-capability-not-grantable"  // a capability consent cannot grant
	CodeConsentNotOperator             Code = "consent-not-operator"              // the granter is not an operator
	CodeConsentCooldown                Code = "consent-cooldown"                  // an operator denied this argv for this identity recently; it may ask again after the cooldown

	// Closed vocabularies, capability admission and plans.
	CodeVocabularyUnknown  Code = "vocabulary-unknown"  // a value outside a closed capability vocabulary
	CodeCapabilityMismatch Code = "capability-mismatch" // no capability (or backend) provides what is required
	CodePolicyInvalid      Code = "policy-invalid"      // malformed host policy (equivalence sets)

	// Operational context, waits, objects.
	CodeSummaryTooLarge  Code = "summary-too-large"  // an operational-context summary above its cap
	CodeDeadlineAboveMax Code = "deadline-above-max" // a deadline missing or above the maximum
	CodeWaitScopeInvalid Code = "wait-scope-invalid" // a wait without a valid source (unknown kind, bad parameter, ID conflict)
	CodeNodeRestricted   Code = "node-restricted"    // a node identity writing an object or field that is not its own
	CodeImmutable        Code = "immutable"          // a change to an immutable field

	// Artifacts and patches.
	CodeDigestMismatch       Code = "digest-mismatch"        // content whose digest differs from the declared one
	CodePatchOutsideRoot     Code = "patch-outside-root"     // a patch path absolute, climbing out, or through a symlink leaving the root
	CodePatchDirty           Code = "patch-dirty"            // the file's content no longer matches the patch's context or base
	CodePatchDeleteForbidden Code = "patch-delete-forbidden" // a delete the patch policy does not allow
	CodePatchTooManyFiles    Code = "patch-too-many-files"   // more changed files than the patch policy allows (hard cap 256)
	CodePatchCreateForbidden Code = "patch-create-forbidden" // a create the patch policy does not allow

	// Workspace hygiene (issue 7 item 3): what a patch may touch, capped by the
	// environment's host-owned spec.patchPolicy, and the identity of its roots.
	CodePatchGitMetadataForbidden     Code = "patch-git-metadata-forbidden"     // .git/hooks/*, .git/config, a .git file, unless the environment allows it
	CodePatchExecutableForbidden      Code = "patch-executable-forbidden"       // a patch setting an executable bit, unless the environment allows it
	CodePatchPolicyExceedsEnvironment Code = "patch-policy-exceeds-environment" // a FilePatch's policy asks for more than its environment allows
	CodeRootOverlap                   Code = "root-overlap"                     // two roots of an environment are nested or the same directory
	CodeRootChanged                   Code = "root-changed"                     // a root's directory is no longer the one opened at allocation

	// Lifecycle.
	CodeInterrupted Code = "interrupted" // the work was cut short (agent restart, stop, cancelled context) and its outcome is recorded as such

	// Object references and shapes checked by the admission webhooks and controllers.
	CodeRootInvalid              Code = "root-invalid"            // an environment root's host directory or source
	CodePatchInvalid             Code = "patch-invalid"           // a structured patch operation without content
	CodeSessionMissing           Code = "session-missing"         // a command names a session that does not exist
	CodeEnvironmentUnavailable   Code = "environment-unavailable" // missing, failed, expired, draining or closed
	CodeSessionClosed            Code = "session-closed"          // a command names a session that has ended
	CodeSessionNotOwned          Code = "session-not-owned"       // a command into someone else's terminal: a session with a PTY program, raw input or a published view that its creator does not own
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
	CodeStorageExhausted     Code = "storage-exhausted"      // the node's storage reservation (storage.maxMiB) cannot hold another environment's disk
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

// Codes of the client surface (output of a command that has not started).
const (
	CodeCommandNotStarted Code = "command-not-started" // output over WebSocket of a command that did not start within the bounded wait
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

// Operational context lifecycle (issue 16 item 7, opctx): the context only rises, and
// what was admitted under an older context is re-evaluated.
const (
	CodeOperationalContextLowered    Code = "operational-context-lowered"    // an update lowers an environment's operational context: it may only rise
	CodeOperationalContextSuperseded Code = "operational-context-superseded" // an admission made under an earlier operational context of the environment: re-evaluate it
)

// Workspace file access (internal/platform/fsaccess), beyond the path codes above.
const (
	CodeOpenat2Unavailable Code = "openat2-unavailable" // the kernel lacks openat2 (RESOLVE_BENEATH): fail closed
	CodePathNotFound       Code = "path-not-found"      // no such file or directory beneath the root
	CodeNotRegularFile     Code = "not-regular-file"    // a read or write of a directory, fifo, device or socket
	CodeNotDirectory       Code = "not-directory"       // a directory was required
	CodeReadCapAboveMax    Code = "read-cap-above-max"  // a read window above the node's hard cap
	CodeTooManyEntries     Code = "too-many-entries"    // a walk or removal above its entry cap
	CodeDigestInvalid      Code = "digest-invalid"      // not "sha256:<64 lowercase hex>"
	CodeFileTooLarge       Code = "file-too-large"      // a whole-file read above the caller's cap
	CodeInvalidArgument    Code = "invalid-argument"    // a malformed numeric argument (negative offset, cap <= 0)
)

// Patch application (internal/platform/patch), beyond the policy codes above.
const (
	CodePatchMalformed          Code = "patch-malformed"           // unparsable, empty, duplicate path, unknown operation or format
	CodePatchTooLarge           Code = "patch-too-large"           // the patch, one file or the total above its size cap
	CodePatchRenameUnsupported  Code = "patch-rename-unsupported"  // a rename or copy in a diff
	CodePatchBinaryUnsupported  Code = "patch-binary-unsupported"  // a binary diff
	CodePatchModeUnsupported    Code = "patch-mode-unsupported"    // a mode change, symlink or submodule entry
	CodePatchTargetNotRegular   Code = "patch-target-not-regular"  // the target is a directory, symlink, fifo...
	CodePatchWriteFailed        Code = "patch-write-failed"        // an I/O failure while writing (rolled back)
	CodePatchRollbackIncomplete Code = "patch-rollback-incomplete" // the rollback itself failed: an operator must look
)

// Artifacts (internal/nodeagent/artifacts).
const (
	CodeArtifactTooLarge Code = "artifact-too-large" // content above the caller's cap (or a cap above the hard cap)
	CodeArtifactNotFound Code = "artifact-not-found" // no blob with that digest
	CodeArtifactCorrupt  Code = "artifact-corrupt"   // stored bytes no longer hash to their digest
	CodeSizeMismatch     Code = "size-mismatch"      // content size differs from the declared size
)

// Directory-copy fixtures (internal/nodeagent/fixture).
const (
	CodeFixtureSymlink        Code = "fixture-symlink"             // a symlink in the source (or later in the copy): refused, never skipped
	CodeFixtureTooLarge       Code = "fixture-too-large"           // file, byte or depth cap reached; the partial copy is removed
	CodeFixtureSpecialFile    Code = "fixture-special-file"        // a fifo, socket or device in the source
	CodeFixtureOutsideManaged Code = "fixture-outside-managed-dir" // a teardown or export target that is not a managed copy
)

// The node agent's store (internal/nodeagent/store) and command identity.
const (
	CodeStoreSchemaNewer    Code = "store-schema-newer"     // the database was written by a newer agent
	CodeStoreSchemaInvalid  Code = "store-schema-invalid"   // the version key is unreadable, or data has no version
	CodeStoreRecordTooLarge Code = "store-record-too-large" // a record above the store's per-record cap
	CodeStoreKeyInvalid     Code = "store-key-invalid"      // an empty key or one above the key cap
	CodeIdempotencyConflict Code = "idempotency-conflict"   // an idempotency key already bound to another command (or another spec)
	CodeSessionOpenFailed   Code = "session-open-failed"    // the session's program could not be opened for a reason without its own code
)

// The node data plane's HTTP errors (internal/nodeagent/dataplane); codes of the other
// lists pass through it unchanged.
const (
	CodeUnauthenticated  Code = "unauthenticated"    // no bearer token, or the API server did not authenticate it (401)
	CodeForbidden        Code = "forbidden"          // SubjectAccessReview denied the virtual subresource (403)
	CodeNotFound         Code = "not-found"          // no such route, object or file (404; also the guest protocol's)
	CodeBadRequest       Code = "bad-request"        // a malformed body, query parameter or object name (400)
	CodeBodyTooLarge     Code = "body-too-large"     // a request body above the data plane's cap (413)
	CodeMethodNotAllowed Code = "method-not-allowed" // the route exists with another method (405)
	CodeUnavailable      Code = "unavailable"        // TokenReview or SubjectAccessReview could not complete; retry (503)
	CodeInternal         Code = "internal"           // an unexpected failure, with no detail beyond what is safe (500)
)

// The guest protocol (guest/protocol/v1). Frame-level codes close the connection;
// binding codes refuse a handshake; operation codes refuse one operation. Path
// refusals use the path codes above (the guest checks paths with
// ValidateRelativePath, and reports a resolution outside the root as symlink-escape).
const (
	CodeBadMagic           Code = "bad-magic"              // a frame without the protocol's magic
	CodeUnsupportedVersion Code = "unsupported-version"    // a frame of another protocol version
	CodeUnknownFrameType   Code = "unknown-frame-type"     // a frame type outside the protocol's set
	CodeReservedFlags      Code = "reserved-flags"         // reserved header flags set
	CodeFrameTooLarge      Code = "frame-too-large"        // a frame above the frame cap
	CodeTooManyChunks      Code = "too-many-chunks"        // a transfer above the chunk-count cap
	CodeTransferTooLarge   Code = "transfer-too-large"     // a transfer above the byte cap
	CodeTruncatedFrame     Code = "truncated-frame"        // a frame shorter than its header says
	CodeUnexpectedFrame    Code = "unexpected-frame"       // a frame type not valid at this point of the exchange
	CodeBadHeader          Code = "bad-header"             // an inconsistent header (length, index, count)
	CodeSequenceReplayed   Code = "sequence-replayed"      // a sequence number not above the last one
	CodeDeadlineMissing    Code = "deadline-missing"       // a request without a deadline
	CodeDeadlineTooLong    Code = "deadline-too-long"      // a request deadline above the protocol's maximum
	CodeDeadlineExceeded   Code = "deadline-exceeded"      // the request's deadline passed
	CodeMalformedPayload   Code = "malformed-payload"      // a payload that is not the operation's strict JSON
	CodeUnknownOperation   Code = "unknown-operation"      // an operation outside the protocol's set
	CodeHandshakeRequired  Code = "handshake-required"     // a request before the handshake
	CodeChannelMismatch    Code = "channel-mismatch"       // a frame of another channel
	CodeTransferIncomplete Code = "transfer-incomplete"    // a transfer that ended before its last chunk
	CodeTransferMismatch   Code = "transfer-mismatch"      // chunks that do not belong to the transfer
	CodeConnectionCap      Code = "connection-cap-reached" // the guest serves its maximum number of connections
	CodeAnswerOverBound    Code = "answer-over-bound"      // a guest answer beyond its request's bounds (entries, entry size): refused while decoding, channel closed

	CodeProtocolMismatch    Code = "protocol-version-mismatch" // the handshake names another protocol version
	CodeEnvironmentMismatch Code = "environment-mismatch"      // the handshake names another environment than the boot binding
	CodeGenerationMismatch  Code = "generation-mismatch"       // the handshake names another generation than the boot binding
	CodePlanDigestMismatch  Code = "plan-digest-mismatch"      // the handshake names another plan than the boot binding
	CodeImageDigestMismatch Code = "image-digest-mismatch"     // the handshake names another image than the boot binding
	CodeNonceMismatch       Code = "nonce-mismatch"            // the handshake's nonce is not the boot binding's
	CodeCIDMismatch         Code = "cid-mismatch"              // the handshake names another vsock CID
	CodeBindingUnavailable  Code = "binding-unavailable"       // the guest has no boot binding to check against
	CodeBindingInvalid      Code = "binding-invalid"           // the guest's boot binding is malformed

	CodeTooLarge             Code = "too-large"              // content or a listing above the guest's cap
	CodeStageCapReached      Code = "stage-cap-reached"      // the guest holds its maximum number of staged patches
	CodeStageUnknown         Code = "stage-unknown"          // a stage reference the guest does not hold
	CodeStageInFlight        Code = "stage-in-flight"        // a stage still being uploaded
	CodeBaseMismatch         Code = "base-mismatch"          // the file's current digest is not the patch's base
	CodeSessionUnknown       Code = "session-unknown"        // a session the guest does not hold
	CodeProcessCapReached    Code = "process-cap-reached"    // the guest runs its maximum number of processes
	CodeQuiesced             Code = "quiesced"               // the guest is quiesced and takes no new work
	CodeTimeoutAboveDeadline Code = "timeout-above-deadline" // an operation timeout above the request deadline
	CodeExecFailed           Code = "exec-failed"            // the program could not be executed (also the sandbox helper's status)
	CodeIOError              Code = "io-error"               // an I/O failure inside the guest
	CodeShuttingDown         Code = "shutting-down"          // the guest is shutting down
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

// Codes of issue 30's recordings of real repositories and portable, signed bundles.
const (
	CodeStateLimitInvalid       Code = "state-limit-invalid"       // a state-hash cap above its ceiling
	CodeBundleHashMissing       Code = "bundle-hash-missing"       // an imported bundle without content_hash: nothing to verify
	CodeBundleFormatLegacy      Code = "bundle-format-legacy"      // a camelCase bundle of a version before the seed's wire format: re-export it
	CodeBundleSignatureInvalid  Code = "bundle-signature-invalid"  // a bundle signature that does not verify over its content hash
	CodeBundleSignerUnknown     Code = "bundle-signer-unknown"     // a signed bundle whose key is not pinned by a BundleSigner
	CodeBundleSignatureRequired Code = "bundle-signature-required" // an unsigned bundle where the import requires a pinned signature
)

// Seed 002 (issue 10): signed action catalogs. The 24 codes of sensorium-os-error-codes.v1,
// verbatim, then the few this implementation adds (catalog structure and signer scope).
const (
	CodeActionCatalogUnauthorized    Code = "action-catalog-unauthorized"    // no verifying signature (missing under Strict, stale, invalid)
	CodeActionNotAllowlisted         Code = "action-not-allowlisted"         // a run names an action the catalog does not declare
	CodeCatalogEntryMissing          Code = "catalog-entry-missing"          // a run names a catalog that does not exist
	CodeScriptHashMismatch           Code = "script-hash-mismatch"           // the executable's content differs from its sha256 pin
	CodeWorkingDirectoryForbidden    Code = "working-directory-forbidden"    // a root, write root or cwd outside what the class allows
	CodeParametersSchemaInvalid      Code = "parameters-schema-invalid"      // parametersSchema is not a well-formed JSON Schema
	CodeResultSchemaInvalid          Code = "result-schema-invalid"          // a json result that is not one JSON object
	CodeResultPointerMissing         Code = "result-pointer-missing"         // a declared pointer field absent from the result
	CodeResultPointerFieldInvalid    Code = "result-pointer-field-invalid"   // a pointer field outside the bounded identifier shape
	CodeActionClassUnknown           Code = "action-class-unknown"           // a class outside C1..C7
	CodeActionClassUnavailable       Code = "action-class-unavailable"       // the node cannot enforce the class: fail closed
	CodeEmergencyPolicyBlocked       Code = "emergency-policy-blocked"       // C3..C6 under Emergency posture without an exception
	CodeActionIDMissing              Code = "action-id-missing"              // an empty action id
	CodeActionIDFormatInvalid        Code = "action-id-format-invalid"       // an id outside the identifier shape or over 128 bytes
	CodeActionIDDuplicate            Code = "action-id-duplicate"            // two declarations with one id
	CodeHostPolicyRequestForbidden   Code = "host-policy-request-forbidden"  // a run's parameters carrying request-local policy or overrides
	CodeAllowlistCatalogMismatch     Code = "allowlist-catalog-mismatch"     // a run pinned to another catalog spec digest
	CodeScriptExecutableMissing      Code = "script-executable-missing"      // no executable path, or the file does not exist
	CodeSensitivityOverrideForbidden Code = "sensitivity-override-forbidden" // an override/downgrade/loosen/relax sensitivity key
	CodeSensitivityKeysForbidden     Code = "sensitivity-keys-forbidden"     // any other unknown sensitivity key
	CodeActionTimeout                Code = "action-timeout"                 // the run exceeded its timeout
	CodeDirectiveMissing             Code = "directive-missing"              // a run without catalog ref or action id
	CodeParametersInvalid            Code = "parameters-invalid"             // parameters that do not satisfy the schema or the template
	CodeScriptNotExecutable          Code = "script-not-executable"          // the executable is not a regular executable file

	// Added by this implementation.
	CodeArgvTemplateInvalid      Code = "argv-template-invalid"       // a malformed or unknown placeholder, or a shell invocation
	CodeActionClassParamsInvalid Code = "action-class-params-invalid" // a class block missing, extra or out of bounds
	CodeCatalogSignerUnknown     Code = "catalog-signer-unknown"      // the signature names no ActionSigner
	CodeCatalogSignerOutOfScope  Code = "catalog-signer-out-of-scope" // the signer may not sign this namespace or class
)

// Seed 002 signing block and observation (issue 30 item 6).
const (
	CodeSigningSignerMismatch        Code = "signing-signer-mismatch"         // the catalog is not signed by the signer its action's signing block names
	CodeSigningDomainNotAllowed      Code = "signing-domain-not-allowed"      // a run requests signatures in a domain the action's signing block does not list (or it has none)
	CodeSigningMaxSignaturesExceeded Code = "signing-max-signatures-exceeded" // a run requests more signatures than the action's maxSignatures
	CodeSigningBlockInvalid          Code = "signing-block-invalid"           // a signing block without signer, with malformed domains or maxSignatures out of 1..16
	CodeIncidentalEffectInvalid      Code = "incidental-effect-invalid"       // a declared incidental effect that is not a lowercase effect name, or too many
)

// Warm pools (issue 13 item 4, docs/pools.md).
const (
	CodePoolNotFound         Code = "pool-not-found"         // spec.poolRef names no EnvironmentPool in the namespace
	CodePoolTemplateMismatch Code = "pool-template-mismatch" // the claimer's allocation differs from the pool template
)

// VM pause/resume and snapshots (issue 13 item 5, docs/vm-pause-snapshot.md).
const (
	CodeEnvironmentPaused Code = "environment-paused" // the environment is paused (spec.desiredState Paused): no new command or session
	CodePauseUnsupported  Code = "pause-unsupported"  // the environment's backend cannot pause; it keeps running
	CodeSnapshotBlocked   Code = "snapshot-blocked"   // the VMM refused to save the guest (a device blocks migration); the exact error follows

	// Host-root tenancy and classified artifacts (issue 25 items 4 and 8).
	CodeRootInUse                       Code = "root-in-use"                       // a host directory (or a parent or child of it) another Environment binds
	CodeArtifactClassificationForbidden Code = "artifact-classification-forbidden" // the caller may not read an artifact of this classification
)

// Backends this build runs and their closed device profiles (issue 29 items 4 and 5).
const (
	CodeBackendNotOffered Code = "backend-not-offered" // no node can offer the backend: this build has no implementation of it (refused at admission, never parked)
	CodeDeviceForbidden   Code = "device-forbidden"    // a device outside the backend's closed profile (a host share, Rosetta, a NIC, graphics, ...)
)

// Repository metadata protection (issue 25 item 2).
const (
	CodeGitMetadataUnbounded Code = "git-metadata-unbounded" // the writable roots hold more directories or repositories than the sandbox protects (a profile with gitMetadata: Writable runs there), or git metadata is a symlink: nothing ran
)

// Results out of a workspace (issue 28): exports as patches and archives.
const (
	CodeExportInvalid     Code = "export-invalid"      // an export's format, root or filePatchRef that cannot be honored
	CodeExportBaseUnknown Code = "export-base-unknown" // a git-patch export whose root has no readable source commit
	CodeExportFailed      Code = "export-failed"       // the node could not compute the export (git failed, time cap)
)

// Workspace sources (issue 28 item 1, internal/platform/sources, docs/workspace-sources.md):
// roots materialized by the node agent from a git commit, an uploaded archive or an OCI
// artifact.
const (
	CodeSourceInvalid             Code = "source-invalid"              // a malformed source: URL scheme, userinfo in a URL, commit shape, OCI reference
	CodeSourceHostNotAllowed      Code = "source-host-not-allowed"     // the source's host (or file:// directory) is outside the node's source allowlist
	CodeSourceRefNotAllowed       Code = "source-ref-not-allowed"      // a branch or tag where node policy allows only a full commit (or only a digest)
	CodeSourceBackendUnsupported  Code = "source-backend-unsupported"  // a sourced root on a backend that does not materialize sources
	CodeSourceCredentialsInvalid  Code = "source-credentials-invalid"  // the credentials Secret is missing, not opted in, or lacks the keys its source needs
	CodeSourceFetchFailed         Code = "source-fetch-failed"         // the fetch failed (network, authentication, timeout, unsupported content)
	CodeSourceCommitNotFound      Code = "source-commit-not-found"     // the repository has no such commit (or the ref names none)
	CodeSourceTreeMismatch        Code = "source-tree-mismatch"        // the checked-out tree differs from the commit's tree
	CodeSourceLFSRefused          Code = "source-lfs-refused"          // the repository uses Git LFS and the source does not declare lfs (or the node cannot fetch it)
	CodeSourceArtifactUnavailable Code = "source-artifact-unavailable" // the archive's Artifact is missing, not complete, on another node or not the pinned digest
	CodeSourceFetchTooLarge       Code = "source-fetch-too-large"      // a git fetch downloaded more than the node's fetch cap (stopped, nothing kept)
	CodeSourceHostKeyUnknown      Code = "source-host-key-unknown"     // an ssh source's host key is not the one pinned in the Secret's known_hosts
	CodeSourceCredentialsRejected Code = "source-credentials-rejected" // the source's server refused the Secret's credentials (an ssh key or HTTPS token it does not accept)
	CodeArchiveInvalid            Code = "archive-invalid"             // the archive (or an OCI layer) cannot be read in its declared format
	CodeArchivePathAbsolute       Code = "archive-path-absolute"       // an entry whose name is an absolute path
	CodeArchivePathTraversal      Code = "archive-path-traversal"      // an entry whose name has a ".." component
	CodeArchivePathInvalid        Code = "archive-path-invalid"        // an entry name that is empty, too long, too deep or has invalid characters
	CodeArchiveLinkEscape         Code = "archive-link-escape"         // a symlink or hardlink pointing outside the root (or a write through a link)
	CodeArchiveSpecialFile        Code = "archive-special-file"        // a device node, fifo, whiteout or other entry type that is not a file, directory or link
	CodeArchiveSetuid             Code = "archive-setuid"              // an entry with the setuid or setgid bit
	CodeArchiveDuplicateEntry     Code = "archive-duplicate-entry"     // two entries with the same name (or a file where a directory was)
	CodeArchiveTooManyEntries     Code = "archive-too-many-entries"    // more entries than the node's cap (a bomb)
	CodeArchiveTooLarge           Code = "archive-too-large"           // more extracted bytes than the node's cap (a bomb)
	CodeArchiveFileTooLarge       Code = "archive-file-too-large"      // one file above the node's per-file cap
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
	CodeSessionCapReached, CodeReaderCapReached, CodeQueueFull, CodeShareCapReached, CodeEventBufferFull,
	CodeConsentRequired, CodeConsentDenied, CodeConsentExpired, CodeConsentRevoked,
	CodeConsentScopeInvalid, CodeConsentPrefixTooBroad, CodeConsentOperatorBindingInactive,
	CodeConsentCapabilityNotGrantable, CodeConsentNotOperator, CodeConsentCooldown,
	CodeVocabularyUnknown, CodeCapabilityMismatch, CodePolicyInvalid,
	CodeSummaryTooLarge, CodeDeadlineAboveMax, CodeWaitScopeInvalid, CodeNodeRestricted, CodeImmutable,
	CodeDigestMismatch, CodePatchOutsideRoot, CodePatchDirty, CodePatchDeleteForbidden,
	CodePatchTooManyFiles, CodePatchCreateForbidden,
	CodePatchGitMetadataForbidden, CodePatchExecutableForbidden, CodePatchPolicyExceedsEnvironment,
	CodeRootOverlap, CodeRootChanged,
	CodeInterrupted,
	CodeRootInvalid, CodePatchInvalid, CodeSessionMissing, CodeEnvironmentUnavailable,
	CodeSessionClosed, CodeSessionNotOwned, CodeRootNotAdmitted, CodeNoPTY, CodeWatchUnavailable, CodeWatchCapReached, CodeLandlockUnavailable,
	CodeUserNamespaceUnavailable, CodeIdmapUnavailable, CodeSeccompUnavailable,
	CodeInputTooLarge, CodeCommandCapReached, CodeInvalidSpec, CodeSessionExists, CodeSessionNotRunning,
	CodeSandboxSetupFailed, CodeGitMetadataUnbounded, CodeCleanupIncomplete, CodeCgroupUnavailable, CodeStartFailed, CodeSourceFailed, CodeConditionUnreachable, CodeProbeTimedOut,
	CodeImageInvalid, CodeResourcesAboveMax, CodeResourcesInvalid, CodeResourceNotEnforced, CodeVMCapReached, CodeBootFailed, CodeBootTimeout,
	CodeVMNotRunning, CodeEnvironmentIDInvalid, CodeStateDirTooLong, CodeStorageExhausted,
	CodeForwardingRefused, CodeNodeUnreachable, CodeOutputEvicted, CodeUploadTooLarge, CodeRawInputDisabled,
	// node lifecycle (nodecap)
	CodeNodeDraining,
	// views (issue 11)
	CodeViewGrantMissing, CodeViewGrantRevoked, CodeViewGrantExpired, CodeViewMembershipInactive,
	CodeViewContextSuperseded, CodeViewContextMissing, CodeViewClassificationExceeded, CodeViewSessionUnavailable,
	CodeViewGrantLifetimeInvalid, CodeViewGrantNotAuthorized, CodeViewSubjectInvalid,
	CodeOpenat2Unavailable, CodePathNotFound, CodeNotRegularFile, CodeNotDirectory, CodeReadCapAboveMax,
	CodeTooManyEntries, CodeDigestInvalid, CodeFileTooLarge, CodeInvalidArgument,
	CodePatchMalformed, CodePatchTooLarge, CodePatchRenameUnsupported, CodePatchBinaryUnsupported,
	CodePatchModeUnsupported, CodePatchTargetNotRegular, CodePatchWriteFailed, CodePatchRollbackIncomplete,
	CodeArtifactTooLarge, CodeArtifactNotFound, CodeArtifactCorrupt, CodeSizeMismatch,
	CodeFixtureSymlink, CodeFixtureTooLarge, CodeFixtureSpecialFile, CodeFixtureOutsideManaged,
	CodeStoreSchemaNewer, CodeStoreSchemaInvalid, CodeStoreRecordTooLarge, CodeStoreKeyInvalid,
	CodeIdempotencyConflict, CodeSessionOpenFailed,
	CodeUnauthenticated, CodeForbidden, CodeNotFound, CodeBadRequest, CodeBodyTooLarge, CodeMethodNotAllowed,
	CodeUnavailable, CodeInternal,
	CodeBadMagic, CodeUnsupportedVersion, CodeUnknownFrameType, CodeReservedFlags, CodeFrameTooLarge,
	CodeTooManyChunks, CodeTransferTooLarge, CodeTruncatedFrame, CodeUnexpectedFrame, CodeBadHeader,
	CodeSequenceReplayed, CodeDeadlineMissing, CodeDeadlineTooLong, CodeDeadlineExceeded, CodeMalformedPayload,
	CodeUnknownOperation, CodeHandshakeRequired, CodeChannelMismatch, CodeTransferIncomplete, CodeTransferMismatch,
	CodeConnectionCap, CodeAnswerOverBound,
	CodeProtocolMismatch, CodeEnvironmentMismatch, CodeGenerationMismatch, CodePlanDigestMismatch,
	CodeImageDigestMismatch, CodeNonceMismatch, CodeCIDMismatch, CodeBindingUnavailable, CodeBindingInvalid,
	CodeTooLarge, CodeStageCapReached, CodeStageUnknown, CodeStageInFlight, CodeBaseMismatch, CodeSessionUnknown,
	CodeProcessCapReached, CodeQuiesced, CodeTimeoutAboveDeadline, CodeExecFailed, CodeIOError, CodeShuttingDown,
	// seed 004
	CodeStateTreeTooLarge, CodeTraceTooLarge, CodeTraceInvalid, CodeRecordingConflict, CodeSkillInvalid,
	CodeSkillParameterMissing, CodeSkillParameterUnknown, CodeSkillParameterInvalid, CodeCapabilityUndeclared,
	CodeStateDiverged, CodeBundleHashMismatch, CodeBundleSchemaInvalid, CodeBundleTooLarge, CodeSecretDetected,
	CodeStateLimitInvalid, CodeBundleHashMissing, CodeBundleFormatLegacy, CodeBundleSignatureInvalid, CodeBundleSignerUnknown,
	CodeBundleSignatureRequired,
	// seed 002 (issue 10)
	CodeActionCatalogUnauthorized, CodeActionNotAllowlisted, CodeCatalogEntryMissing, CodeScriptHashMismatch,
	CodeWorkingDirectoryForbidden, CodeParametersSchemaInvalid, CodeResultSchemaInvalid, CodeResultPointerMissing,
	CodeResultPointerFieldInvalid, CodeActionClassUnknown, CodeActionClassUnavailable, CodeEmergencyPolicyBlocked,
	CodeActionIDMissing, CodeActionIDFormatInvalid, CodeActionIDDuplicate, CodeHostPolicyRequestForbidden,
	CodeAllowlistCatalogMismatch, CodeScriptExecutableMissing, CodeSensitivityOverrideForbidden, CodeSensitivityKeysForbidden,
	CodeActionTimeout, CodeDirectiveMissing, CodeParametersInvalid, CodeScriptNotExecutable,
	CodeArgvTemplateInvalid, CodeActionClassParamsInvalid, CodeCatalogSignerUnknown, CodeCatalogSignerOutOfScope,
	CodeCommandNotStarted,
	// seed 002 signing block and observation (issue 30)
	CodeSigningSignerMismatch, CodeSigningDomainNotAllowed, CodeSigningMaxSignaturesExceeded, CodeSigningBlockInvalid, CodeIncidentalEffectInvalid,
	// warm pools (issue 13)
	CodePoolNotFound, CodePoolTemplateMismatch,
	// operational context lifecycle (opctx)
	CodeOperationalContextLowered, CodeOperationalContextSuperseded,
	// VM pause/resume and snapshots (vmsnap)
	CodeEnvironmentPaused, CodePauseUnsupported, CodeSnapshotBlocked,
	// host-root tenancy and classified artifacts (issue 25)
	CodeRootInUse, CodeArtifactClassificationForbidden,
	// backends this build runs, closed device profiles (issue 29)
	CodeBackendNotOffered, CodeDeviceForbidden,
	// results out (issue 28)
	CodeExportInvalid, CodeExportBaseUnknown, CodeExportFailed,
	// workspace sources (issue 28)
	CodeSourceInvalid, CodeSourceHostNotAllowed, CodeSourceRefNotAllowed, CodeSourceBackendUnsupported,
	CodeSourceCredentialsInvalid, CodeSourceFetchFailed, CodeSourceCommitNotFound, CodeSourceTreeMismatch,
	CodeSourceLFSRefused, CodeSourceArtifactUnavailable, CodeSourceFetchTooLarge, CodeSourceHostKeyUnknown, CodeSourceCredentialsRejected, CodeArchiveInvalid, CodeArchivePathAbsolute,
	CodeArchivePathTraversal, CodeArchivePathInvalid, CodeArchiveLinkEscape, CodeArchiveSpecialFile,
	CodeArchiveSetuid, CodeArchiveDuplicateEntry, CodeArchiveTooManyEntries, CodeArchiveTooLarge,
	CodeArchiveFileTooLarge,
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
//
// It is the one refusal type of the tree: the core, the platform packages,
// the backends, the node agent and the guest return it (possibly wrapped) and
// callers read its code with CodeOf. Wire forms (the guest protocol's error
// payload, the data plane's status body, API status fields) are converted to
// and from it at their edge only.
type Refusal struct {
	Code    Code   `json:"code"`
	Field   string `json:"field,omitempty"`
	Message string `json:"message"`
	// Cause, when set, is the underlying error, reachable through errors.Is
	// and errors.As (e.g. fs.ErrNotExist under CodePathNotFound). It is never
	// serialized.
	Cause error `json:"-"`
}

// Error renders "<code>: <field>: <message>: <cause>", omitting the field
// part when Field is empty and the cause part when Cause is nil.
func (r *Refusal) Error() string {
	if r == nil {
		return "<nil refusal>"
	}
	s := string(r.Code) + ": "
	if r.Field != "" {
		s += r.Field + ": "
	}
	s += r.Message
	if r.Cause != nil {
		s += ": " + r.Cause.Error()
	}
	return s
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
