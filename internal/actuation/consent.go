package actuation

import (
	"slices"
	"strings"
	"time"
)

// ConsentScope is the scope an operator granted (seed 000 "operator consent
// prompting"), ordered from narrow to broad.
type ConsentScope string

// Consent scopes. remember-executable-any-args is not part of the vocabulary:
// no host policy gate is registered for it, so it is refused as
// consent-scope-invalid.
const (
	ScopeDeny               ConsentScope = "deny"
	ScopeAllowOnce          ConsentScope = "allow-once"
	ScopeRememberExactArgv  ConsentScope = "remember-exact-argv"
	ScopeRememberArgvPrefix ConsentScope = "remember-argv-prefix"
)

// consentScopes are the admitted scopes, narrow to broad.
var consentScopes = []ConsentScope{ScopeDeny, ScopeAllowOnce, ScopeRememberExactArgv, ScopeRememberArgvPrefix}

// ConsentScopes returns the admitted scopes, narrow to broad.
func ConsentScopes() []ConsentScope { return slices.Clone(consentScopes) }

func scopeRank(s ConsentScope) int { return slices.Index(consentScopes, s) }

// ConsentEntry is one effective consent projected onto a command profile.
// The effective profile is the base profile plus its entries: an entry only
// adds argv shapes, bound to the exact cwd the operator reviewed; egress,
// credentials, roots, timeout and output caps stay the base profile's
// (decision 37).
type ConsentEntry struct {
	Scope            ConsentScope `json:"scope"`
	GrantRef         string       `json:"grantRef"`
	Argv             []string     `json:"argv,omitempty"`             // allow-once, remember-exact-argv: the whole argv; deny: optional
	Prefix           []string     `json:"prefix,omitempty"`           // remember-argv-prefix: fixed leading atoms, Prefix[0] == Executable
	VariablePrefixes []string     `json:"variablePrefixes,omitempty"` // remember-argv-prefix: each further atom has one of these prefixes
	Cwd              CwdAddress   `json:"cwd"`                        // the exact cwd reviewed
	CommandRef       string       `json:"commandRef,omitempty"`       // allow-once: the only command (namespace/name) that may use it
	// Binding (decision 37, issue 7): an allow-once entry names the one command object
	// (its UID) and the argv digest the operator reviewed; every entry names the
	// environment it was reviewed on. Admit matches an entry only when the subject's UID
	// and environment equal these (both empty only in core vectors, which have no
	// objects).
	CommandUID  string `json:"commandUID,omitempty"`  // allow-once: UID of the only command object
	ArgvDigest  string `json:"argvDigest,omitempty"`  // allow-once: ArgvDigest(profileRef, argv, cwd) reviewed
	Environment string `json:"environment,omitempty"` // environment the operator reviewed it on
	// EnvironmentUID is the UID of the environment object it was reviewed on: an entry
	// admits a subject that names an environment UID only when the two are equal (a
	// deleted and recreated environment of the same name does not inherit it).
	EnvironmentUID string `json:"environmentUID,omitempty"`
	// ExpiresAt is when the grant behind the entry stops being effective (zero: the
	// projection named none). The node refuses a remembered entry past it
	// (ConsentEntryLapsed) without waiting for the manager to drop it.
	ExpiresAt time.Time `json:"expiresAt,omitzero"`
	// Context is the operational context the operator reviewed the entry under (seed 000
	// decisions 37 and 40): a remembered entry admits only while the subject's environment
	// is in this class or a lower one (ReviewedContextHolds).
	Context ContextClass `json:"context,omitempty"`
}

// Subject is the command object an admission decision is for.
type Subject struct {
	Ref         string // namespace/name
	UID         string // the object's UID: a recreated object is another subject
	Environment string // the environment the command would run in
	// EnvironmentUID is that environment object's UID ("" only in core vectors and where the
	// caller has no object): when set, only entries bound to the same UID admit.
	EnvironmentUID string
	// Context is the environment's effective operational context now ("" only in core
	// vectors and for an environment not planned yet).
	Context ContextClass
}

// ReviewedContextHolds says whether entry e may admit for subject s under s's operational
// context. A remembered entry (remember-exact-argv, remember-argv-prefix) was reviewed by an
// operator under a context; it admits only while the environment's context is that class
// or a lower one, so a grant reviewed under "test" does not admit once the environment was
// raised to "production" — the operator is asked again, under the new class. An entry that
// recorded no context (reviewed before contexts were recorded) admits under no context:
// it fails closed. An allow-once entry is held to the command's admission context instead
// (CheckAdmissionContext, operational-context-superseded), and a deny entry denies under
// every context (denying only reduces authority).
func ReviewedContextHolds(e *ConsentEntry, s Subject) bool {
	if s.Context == "" || (e.Scope != ScopeRememberExactArgv && e.Scope != ScopeRememberArgvPrefix) {
		return true
	}
	return e.Context != "" && contextRank(e.Context) >= contextRank(s.Context)
}

// Host caps of remember-argv-prefix (decision 37).
const (
	MaxConsentPrefixAtoms      = 16
	MaxConsentVariablePrefixes = 8
	MaxGrantRefBytes           = 253
)

// ValidateConsentEntry checks one entry against its base profile:
// a known scope and a grantRef (consent-scope-invalid); the cwd against the
// profile's roots and cwd policy (root-not-allowed, path codes,
// cwd-not-allowed); then per scope:
//
//   - deny: admits nothing; Prefix and VariablePrefixes must be empty, an
//     Argv (the denied argv, for suppressing repeated prompts) must have a
//     valid shape;
//   - allow-once: Argv passes ValidateArgvShape and starts with Executable
//     (argv-not-admitted), CommandRef is set (consent-scope-invalid);
//   - remember-exact-argv: as allow-once without CommandRef;
//   - remember-argv-prefix: 1 <= len(Prefix) <= MaxConsentPrefixAtoms,
//     Prefix[0] == Executable, at most MaxConsentVariablePrefixes non-empty
//     variable prefixes, and no inline-code flag reachable through Prefix or
//     VariablePrefixes (all consent-prefix-too-broad); Prefix atoms must have
//     a valid shape.
//
// Fields that do not belong to the scope are refused with
// consent-scope-invalid.
func ValidateConsentEntry(p Profile, e ConsentEntry) *Refusal {
	if scopeRank(e.Scope) < 0 {
		return Refuse(CodeConsentScopeInvalid, "scope", "must be one of %q (got %q)", ConsentScopes(), truncateForMessage(string(e.Scope)))
	}
	if e.GrantRef == "" || len(e.GrantRef) > MaxGrantRefBytes {
		return Refuse(CodeConsentScopeInvalid, "grantRef", "must name the grant, at most %d bytes", MaxGrantRefBytes)
	}
	if r := FirstRefusal(validateCwd(p, e.Cwd, "cwd")); r != nil {
		return r
	}
	if e.Scope != ScopeAllowOnce && (e.CommandRef != "" || e.CommandUID != "" || e.ArgvDigest != "") {
		return Refuse(CodeConsentScopeInvalid, "commandRef", "must be empty for scope %q", e.Scope)
	}
	if e.Scope != ScopeRememberArgvPrefix && (len(e.Prefix) > 0 || len(e.VariablePrefixes) > 0) {
		return Refuse(CodeConsentScopeInvalid, "prefix", "must be empty for scope %q", e.Scope)
	}
	switch e.Scope {
	case ScopeDeny:
		if len(e.Argv) > 0 {
			if r := FirstRefusal(ValidateArgvShape(e.Argv)); r != nil {
				return relocate(r, "spec.argv", "argv")
			}
		}
		return nil
	case ScopeAllowOnce, ScopeRememberExactArgv:
		if e.Scope == ScopeAllowOnce && e.CommandRef == "" {
			return Refuse(CodeConsentScopeInvalid, "commandRef", "must name the one command that may use an allow-once consent")
		}
		if r := FirstRefusal(ValidateArgvShape(e.Argv)); r != nil {
			return relocate(r, "spec.argv", "argv")
		}
		if e.Argv[0] != p.Executable {
			return Refuse(CodeArgvNotAdmitted, "argv[0]", "must be the profile executable %q", truncateForMessage(p.Executable))
		}
		return nil
	default: // ScopeRememberArgvPrefix
		if len(e.Argv) > 0 {
			return Refuse(CodeConsentScopeInvalid, "argv", "must be empty for scope %q", e.Scope)
		}
		switch {
		case len(e.Prefix) == 0:
			return Refuse(CodeConsentPrefixTooBroad, "prefix", "must start with the profile executable")
		case len(e.Prefix) > MaxConsentPrefixAtoms:
			return Refuse(CodeConsentPrefixTooBroad, "prefix", "must not have more than %d atoms (got %d)", MaxConsentPrefixAtoms, len(e.Prefix))
		case e.Prefix[0] != p.Executable:
			return Refuse(CodeConsentPrefixTooBroad, "prefix[0]", "must be the profile executable %q", truncateForMessage(p.Executable))
		case len(e.VariablePrefixes) > MaxConsentVariablePrefixes:
			return Refuse(CodeConsentPrefixTooBroad, "variablePrefixes", "must not have more than %d entries (got %d)", MaxConsentVariablePrefixes, len(e.VariablePrefixes))
		}
		if r := FirstRefusal(ValidateArgvShape(e.Prefix)); r != nil {
			return relocate(r, "spec.argv", "prefix")
		}
		for i, vp := range e.VariablePrefixes {
			f := fieldIndex("variablePrefixes", i)
			if vp == "" {
				return Refuse(CodeConsentPrefixTooBroad, f, "must not be empty: an empty prefix would admit any atom")
			}
			if msg := atomProblem(vp); msg != "" {
				return Refuse(CodeConsentPrefixTooBroad, f, "%s", msg)
			}
		}
		if r := checkInlineCode(CodeConsentPrefixTooBroad, p.Executable, e.Prefix[1:], "prefix", 1, e.VariablePrefixes, "variablePrefixes"); r != nil {
			return r
		}
		return nil
	}
}

// relocate rewrites the field of a shape refusal from one list to another.
func relocate(r *Refusal, from, to string) *Refusal {
	if strings.HasPrefix(r.Field, from) {
		r.Field = to + strings.TrimPrefix(r.Field, from)
	}
	return r
}

// Admission is the argv decision for one intent.
type Admission struct {
	Admitted bool
	By       string       // "profile" or the GrantRef of the admitting entry
	Scope    ConsentScope // scope of the admitting (or denying) entry; "" when By is "profile"
	Refusal  *Refusal     // set when not admitted
}

// AdmittedByProfile is the Admission.By value of argv the base profile admits.
const AdmittedByProfile = "profile"

// Admit decides argv admission for an intent under the effective profile
// (base profile plus entries):
//
//  1. an argv refused by ValidateArgvShape is refused with that code;
//  2. the base profile admits it (By "profile");
//  3. entries are considered only when valid (ValidateConsentEntry) and
//     their Cwd equals the intent's Cwd exactly; a matching deny entry with
//     the same argv refuses with consent-denied;
//  4. otherwise the narrowest matching entry admits (allow-once only when
//     its CommandRef equals a non-empty commandRef, then
//     remember-exact-argv, then remember-argv-prefix; ties by GrantRef);
//  5. otherwise: argv[0] other than the executable is argv-not-admitted
//     (no consent can add an executable); anything else is consent-required,
//     meaning an operator could approve it.
//
// Admit decides argv only; callers also run ValidateIntentAgainstProfile.
// Expired, revoked or inactive consents must not be passed in.
func Admit(p Profile, entries []ConsentEntry, in CommandIntent, commandRef string) Admission {
	return AdmitSubject(p, entries, in, Subject{Ref: commandRef})
}

// AdmitSubject is Admit for a bound subject: an entry admits only on the environment it
// names (Environment == s.Environment) and under the operational context it was reviewed
// under (ReviewedContextHolds), and an allow-once entry only the command object it names
// (CommandRef, CommandUID) with exactly the argv digest the operator reviewed.
func AdmitSubject(p Profile, entries []ConsentEntry, in CommandIntent, s Subject) Admission {
	if r := FirstRefusal(ValidateArgvShape(in.Argv)); r != nil {
		return Admission{Refusal: r}
	}
	// Tools that read code-running options anywhere (git): no profile, prefix or grant
	// admits them.
	if r := checkConcreteArgv(CodeShellString, p.Executable, in.Argv); r != nil {
		return Admission{Refusal: r}
	}
	profileRefusal := AdmitArgvByProfile(p, in.Argv)
	if profileRefusal == nil {
		return Admission{Admitted: true, By: AdmittedByProfile}
	}
	var best *ConsentEntry
	for i := range entries {
		e := &entries[i]
		if e.Cwd != in.Cwd || e.Environment != s.Environment || !ReviewedContextHolds(e, s) || !environmentUIDHolds(e, s) || ValidateConsentEntry(p, *e) != nil {
			continue
		}
		if !entryMatches(e, in, s) {
			continue
		}
		if e.Scope == ScopeDeny {
			return Admission{By: e.GrantRef, Scope: ScopeDeny, Refusal: Refuse(CodeConsentDenied, "spec.argv", "must not run: an operator denied this command (%s)", truncateForMessage(e.GrantRef))}
		}
		if best == nil || scopeRank(e.Scope) < scopeRank(best.Scope) ||
			(e.Scope == best.Scope && e.GrantRef < best.GrantRef) {
			best = e
		}
	}
	if best != nil {
		return Admission{Admitted: true, By: best.GrantRef, Scope: best.Scope}
	}
	if in.Argv[0] != p.Executable {
		return Admission{Refusal: profileRefusal}
	}
	return Admission{Refusal: Refuse(CodeConsentRequired, profileRefusal.Field, "must be approved by an operator: the profile does not admit it (%s)", profileRefusal.Message)}
}

// BindingMatches reports whether an allow-once entry is bound to exactly this subject and
// intent: the same command reference and object UID, the same argv, and (when the entry
// carries one, as every projected entry does) the argv digest the operator reviewed.
func BindingMatches(e *ConsentEntry, in CommandIntent, s Subject) bool {
	if s.Ref == "" || e.CommandRef != s.Ref || e.CommandUID != s.UID || !slices.Equal(e.Argv, in.Argv) {
		return false
	}
	if s.UID != "" && e.ArgvDigest == "" {
		return false // an object-bound subject needs an object-bound entry
	}
	return e.ArgvDigest == "" || e.ArgvDigest == ArgvDigest(in.ProfileRef, in.Argv, in.Cwd)
}

// entryMatches reports whether a valid entry covers argv.
func entryMatches(e *ConsentEntry, in CommandIntent, s Subject) bool {
	argv := in.Argv
	switch e.Scope {
	case ScopeDeny:
		return len(e.Argv) > 0 && slices.Equal(e.Argv, argv)
	case ScopeAllowOnce:
		return BindingMatches(e, in, s)
	case ScopeRememberExactArgv:
		return slices.Equal(e.Argv, argv)
	case ScopeRememberArgvPrefix:
		if len(argv) < len(e.Prefix) || !slices.Equal(argv[:len(e.Prefix)], e.Prefix) {
			return false
		}
		return firstUnprefixed(argv, len(e.Prefix), e.VariablePrefixes) < 0
	}
	return false
}

// environmentUIDHolds says whether entry e may admit for subject s by the environment
// object it was reviewed on: when s names its environment's UID, an admitting entry must
// name the same UID (an entry that names none — reviewed before UIDs were recorded —
// admits no UID-bound subject: it fails closed). A deny entry denies on every object.
func environmentUIDHolds(e *ConsentEntry, s Subject) bool {
	return s.EnvironmentUID == "" || e.Scope == ScopeDeny || e.EnvironmentUID == s.EnvironmentUID
}

// ConsentEntryLapsed refuses an entry whose grant is no longer effective at now by its
// own expiry: consent-expired once now is at or past ExpiresAt, or when the entry carries
// no expiry at all (every projected entry does; one without is not trusted). A deny entry
// never lapses here (denying only reduces authority).
func ConsentEntryLapsed(e ConsentEntry, now time.Time) *Refusal {
	if e.Scope == ScopeDeny {
		return nil
	}
	if e.ExpiresAt.IsZero() {
		return Refuse(CodeConsentExpired, "grantRef", "grant %s must name its expiry to admit at the node", truncateForMessage(e.GrantRef))
	}
	if !now.Before(e.ExpiresAt) {
		return Refuse(CodeConsentExpired, "grantRef", "grant %s expired at %s; it must not admit after its expiry", truncateForMessage(e.GrantRef), e.ExpiresAt.UTC().Format(time.RFC3339))
	}
	return nil
}
