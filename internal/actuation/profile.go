package actuation

import (
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// EnvVar is one environment variable.
type EnvVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

// EnvMode selects how a command's environment is built.
type EnvMode string

// Environment modes.
const (
	// EnvModeProfileDefaultsOnly: the profile's defaults and nothing else.
	EnvModeProfileDefaultsOnly EnvMode = "ProfileDefaultsOnly"
	// EnvModeAllowlistedOverrides: defaults plus intent overrides of the keys
	// listed in AllowedOverrides.
	EnvModeAllowlistedOverrides EnvMode = "AllowlistedOverrides"
)

// EnvPolicy is the curated environment of a profile. An empty default value
// is an explicit empty value, never an unset (decision 27).
type EnvPolicy struct {
	Mode             EnvMode  `json:"mode"`
	Defaults         []EnvVar `json:"defaults,omitempty"`
	AllowedOverrides []string `json:"allowedOverrides,omitempty"`
}

// CwdPolicy bounds the working directory of a command.
type CwdPolicy string

// Working directory policies.
const (
	// CwdRootOnly: the cwd path must be "" (the root itself).
	CwdRootOnly CwdPolicy = "RootOnly"
	// CwdBeneathRoot: any valid relative path beneath an allowed root.
	CwdBeneathRoot CwdPolicy = "BeneathRoot"
)

// Values of the closed profile enums.
const (
	EgressDeny        = "Deny"
	CredentialsDenied = "Denied"
	PTYDisabled       = "Disabled"
	PTYAllowed        = "Allowed"
)

// Profile is an allowlisted command shape (CommandProfile spec).
type Profile struct {
	Executable         string    `json:"executable"`                   // absolute, clean path
	FixedArgs          []string  `json:"fixedArgs,omitempty"`          // exact atoms after the executable
	AllowedArgPrefixes []string  `json:"allowedArgPrefixes,omitempty"` // empty = no variable atoms at all
	AllowedRoots       []string  `json:"allowedRoots"`                 // root names; empty is an error, never a wildcard
	CwdPolicy          CwdPolicy `json:"cwdPolicy"`
	Env                EnvPolicy `json:"env"`
	Egress             string    `json:"egress"`      // only "Deny"
	Credentials        string    `json:"credentials"` // only "Denied"
	MaxTimeoutSeconds  int64     `json:"maxTimeoutSeconds"`
	MaxOutputBytes     int64     `json:"maxOutputBytes"`
	PTY                string    `json:"pty"` // "Disabled" | "Allowed"
	// GitMetadata: "" (= "ReadOnly") or "Writable" (issue 25: repository metadata under
	// the writable roots is read-only in the sandbox unless Writable).
	GitMetadata string `json:"gitMetadata,omitempty"`
}

// GitMetadataWritable reports whether the profile lets its programs write git metadata.
func (p Profile) GitMetadataWritable() bool { return p.GitMetadata == "Writable" }

// Bounds of profiles and argv.
const (
	MaxTimeoutSecondsCap = MaxCommandTimeoutSeconds // the node ceiling (limits.go)
	MaxOutputBytesCap    = MaxCommandOutputBytes    // the node ceiling (limits.go)
	MaxArgv              = 256
	MaxArgBytes          = 4096
	MaxArgvTotalBytes    = 64 << 10

	MaxFixedArgs       = 32
	MaxArgPrefixes     = 64
	MaxAllowedRoots    = 16
	MaxEnvDefaults     = 64
	MaxEnvOverrides    = 64
	MaxProfileRefBytes = 253
)

// ValidateProfile checks a command profile (decisions 9 and 25). It returns
// every refusal, in field order: executable (executable-not-absolute,
// shell-string), fixedArgs, allowedArgPrefixes (an empty entry is
// profile-invalid; inline-code reachability is shell-string), allowedRoots
// (empty: profile-roots-empty; bad or duplicate names: profile-invalid),
// cwdPolicy, env (env codes; bad mode, duplicates or overrides under
// ProfileDefaultsOnly: profile-invalid), egress (egress-forbidden),
// credentials (credentials-forbidden), maxTimeoutSeconds (below 1:
// profile-invalid, above MaxTimeoutSecondsCap: timeout-above-max),
// maxOutputBytes (below 1: profile-invalid, above MaxOutputBytesCap:
// output-cap-above-max) and pty (profile-invalid).
func ValidateProfile(p Profile) []*Refusal {
	var rs []*Refusal
	add := func(r *Refusal) {
		if r != nil {
			rs = append(rs, r)
		}
	}

	exeRefusal := CheckExecutable(p.Executable)
	add(exeRefusal)

	if len(p.FixedArgs) > MaxFixedArgs {
		add(Refuse(CodeProfileInvalid, "spec.fixedArgs", "must not have more than %d entries (got %d)", MaxFixedArgs, len(p.FixedArgs)))
	}
	for i, a := range p.FixedArgs[:min(len(p.FixedArgs), MaxFixedArgs)] {
		if msg := atomProblem(a); msg != "" {
			add(Refuse(CodeProfileInvalid, fieldIndex("spec.fixedArgs", i), "%s", msg))
		}
	}
	if len(p.AllowedArgPrefixes) > MaxArgPrefixes {
		add(Refuse(CodeProfileInvalid, "spec.allowedArgPrefixes", "must not have more than %d entries (got %d)", MaxArgPrefixes, len(p.AllowedArgPrefixes)))
	}
	for i, a := range p.AllowedArgPrefixes[:min(len(p.AllowedArgPrefixes), MaxArgPrefixes)] {
		f := fieldIndex("spec.allowedArgPrefixes", i)
		switch {
		case a == "":
			add(Refuse(CodeProfileInvalid, f, "must not be empty: an empty prefix would admit any atom"))
		case atomProblem(a) != "":
			add(Refuse(CodeProfileInvalid, f, "%s", atomProblem(a)))
		case slices.Index(p.AllowedArgPrefixes, a) < i:
			add(Refuse(CodeProfileInvalid, f, "must not repeat %q", truncateForMessage(a)))
		}
	}
	if exeRefusal == nil {
		add(checkInlineCode(CodeShellString, p.Executable, p.FixedArgs, "spec.fixedArgs", 0, p.AllowedArgPrefixes, "spec.allowedArgPrefixes"))
	}

	switch {
	case len(p.AllowedRoots) == 0:
		add(Refuse(CodeProfileRootsEmpty, "spec.allowedRoots", "must name at least one root: an empty list is an error, never a wildcard"))
	case len(p.AllowedRoots) > MaxAllowedRoots:
		add(Refuse(CodeProfileInvalid, "spec.allowedRoots", "must not have more than %d entries (got %d)", MaxAllowedRoots, len(p.AllowedRoots)))
	}
	for i, root := range p.AllowedRoots[:min(len(p.AllowedRoots), MaxAllowedRoots)] {
		f := fieldIndex("spec.allowedRoots", i)
		if r := ValidateRootName(root); r != nil {
			r.Field = f
			add(r)
		} else if slices.Index(p.AllowedRoots, root) < i {
			add(Refuse(CodeProfileInvalid, f, "must not repeat root %q", root))
		}
	}

	switch p.CwdPolicy {
	case CwdRootOnly, CwdBeneathRoot:
	default:
		add(Refuse(CodeProfileInvalid, "spec.cwdPolicy", "must be %q or %q (got %q)", CwdRootOnly, CwdBeneathRoot, truncateForMessage(string(p.CwdPolicy))))
	}

	rs = append(rs, validateEnvPolicy(p.Env)...)

	if p.Egress != EgressDeny {
		add(Refuse(CodeEgressForbidden, "spec.egress", "must be %q: network egress has no grant path (got %q)", EgressDeny, truncateForMessage(p.Egress)))
	}
	if p.Credentials != CredentialsDenied {
		add(Refuse(CodeCredentialsForbidden, "spec.credentials", "must be %q: credentials have no grant path (got %q)", CredentialsDenied, truncateForMessage(p.Credentials)))
	}
	switch {
	case p.MaxTimeoutSeconds < 1:
		add(Refuse(CodeProfileInvalid, "spec.maxTimeoutSeconds", "must be at least 1 (got %d)", p.MaxTimeoutSeconds))
	case p.MaxTimeoutSeconds > MaxTimeoutSecondsCap:
		add(Refuse(CodeTimeoutAboveMax, "spec.maxTimeoutSeconds", "must not exceed %d (got %d)", MaxTimeoutSecondsCap, p.MaxTimeoutSeconds))
	}
	switch {
	case p.MaxOutputBytes < 1:
		add(Refuse(CodeProfileInvalid, "spec.maxOutputBytes", "must be at least 1 (got %d)", p.MaxOutputBytes))
	case p.MaxOutputBytes > MaxOutputBytesCap:
		add(Refuse(CodeOutputCapAboveMax, "spec.maxOutputBytes", "must not exceed %d (got %d)", MaxOutputBytesCap, p.MaxOutputBytes))
	}
	switch p.PTY {
	case PTYDisabled, PTYAllowed:
	default:
		add(Refuse(CodeProfileInvalid, "spec.pty", "must be %q or %q (got %q)", PTYDisabled, PTYAllowed, truncateForMessage(p.PTY)))
	}
	switch p.GitMetadata {
	case "", "ReadOnly", "Writable":
	default:
		add(Refuse(CodeProfileInvalid, "spec.gitMetadata", "must be \"ReadOnly\" or \"Writable\" (got %q)", truncateForMessage(p.GitMetadata)))
	}
	return rs
}

// validateEnvPolicy checks the env part of a profile.
func validateEnvPolicy(e EnvPolicy) []*Refusal {
	var rs []*Refusal
	switch e.Mode {
	case EnvModeProfileDefaultsOnly, EnvModeAllowlistedOverrides:
	default:
		rs = append(rs, Refuse(CodeProfileInvalid, "spec.env.mode", "must be %q or %q (got %q)", EnvModeProfileDefaultsOnly, EnvModeAllowlistedOverrides, truncateForMessage(string(e.Mode))))
	}
	if len(e.Defaults) > MaxEnvDefaults {
		rs = append(rs, Refuse(CodeProfileInvalid, "spec.env.defaults", "must not have more than %d entries (got %d)", MaxEnvDefaults, len(e.Defaults)))
	}
	seen := make(map[string]bool, len(e.Defaults))
	for i, v := range e.Defaults[:min(len(e.Defaults), MaxEnvDefaults)] {
		f := fieldIndex("spec.env.defaults", i)
		vrs := validateEnvVarAt(v, f)
		rs = append(rs, vrs...)
		if len(vrs) == 0 && seen[v.Name] {
			rs = append(rs, Refuse(CodeProfileInvalid, fieldJoin(f, "name"), "must not repeat %q", v.Name))
		}
		seen[v.Name] = true
	}
	if len(e.AllowedOverrides) > MaxEnvOverrides {
		rs = append(rs, Refuse(CodeProfileInvalid, "spec.env.allowedOverrides", "must not have more than %d entries (got %d)", MaxEnvOverrides, len(e.AllowedOverrides)))
	}
	if e.Mode == EnvModeProfileDefaultsOnly && len(e.AllowedOverrides) > 0 {
		rs = append(rs, Refuse(CodeProfileInvalid, "spec.env.allowedOverrides", "must be empty when mode is %q", EnvModeProfileDefaultsOnly))
	}
	for i, k := range e.AllowedOverrides[:min(len(e.AllowedOverrides), MaxEnvOverrides)] {
		f := fieldIndex("spec.env.allowedOverrides", i)
		if r := ValidateOverrideKey(k); r != nil {
			r.Field = f
			rs = append(rs, r)
		} else if slices.Index(e.AllowedOverrides, k) < i {
			rs = append(rs, Refuse(CodeProfileInvalid, f, "must not repeat %q", k))
		}
	}
	return rs
}

// atomProblem describes why an argv atom is malformed, or returns "".
func atomProblem(a string) string {
	switch {
	case len(a) > MaxArgBytes:
		return "must not be longer than " + strconv.Itoa(MaxArgBytes) + " bytes"
	case strings.IndexByte(a, 0) >= 0:
		return "must not contain NUL"
	case !utf8.ValidString(a):
		return "must be valid UTF-8"
	}
	return ""
}

// shellMetacharacters are the characters that make argv[0] a shell string:
// whitespace and control characters are checked separately.
const shellMetacharacters = ";|&$`<>(){}*?~'\"\\"

// ValidateArgvShape checks argv as data: non-empty, at most MaxArgv atoms,
// each at most MaxArgBytes, at most MaxArgvTotalBytes in total, no NUL,
// valid UTF-8 (argv-invalid; more than MaxArgv atoms is the only refusal
// reported for such an argv, so the work stays bounded). An argv[0] that is empty is argv-invalid; one
// containing whitespace, a control character or a shell metacharacter
// (; | & $ ` < > ( ) { } * ? ~ quotes backslash) is a shell string
// (shell-string). Refusals come in index order.
func ValidateArgvShape(argv []string) []*Refusal {
	if len(argv) == 0 {
		return []*Refusal{Refuse(CodeArgvInvalid, "spec.argv", "must not be empty")}
	}
	if len(argv) > MaxArgv {
		return []*Refusal{Refuse(CodeArgvInvalid, "spec.argv", "must not have more than %d atoms (got %d)", MaxArgv, len(argv))}
	}
	var rs []*Refusal
	total := 0
	for i, a := range argv {
		total += len(a)
		f := fieldIndex("spec.argv", i)
		if msg := atomProblem(a); msg != "" {
			rs = append(rs, Refuse(CodeArgvInvalid, f, "%s", msg))
			continue
		}
		if i == 0 {
			if a == "" {
				rs = append(rs, Refuse(CodeArgvInvalid, f, "must name the program"))
			} else if isShellString(a) {
				rs = append(rs, Refuse(CodeShellString, f, "must be a program path, not a shell string (%q)", truncateForMessage(a)))
			}
		}
	}
	if total > MaxArgvTotalBytes {
		rs = append(rs, Refuse(CodeArgvInvalid, "spec.argv", "must not exceed %d bytes in total (got %d)", MaxArgvTotalBytes, total))
	}
	return rs
}

func isShellString(a string) bool {
	for _, r := range a {
		if unicode.IsSpace(r) || unicode.IsControl(r) || strings.ContainsRune(shellMetacharacters, r) {
			return true
		}
	}
	return false
}

// CommandIntent is a structured command request (TerminalCommand spec).
type CommandIntent struct {
	ProfileRef     string     `json:"profileRef"`
	Argv           []string   `json:"argv"`
	Cwd            CwdAddress `json:"cwd"`
	Env            []EnvVar   `json:"env,omitempty"`
	TimeoutSeconds int64      `json:"timeoutSeconds"`
	OutputBytes    int64      `json:"outputBytes"`
}

// CwdAddress is a working directory: a root name plus a root-relative path
// ("" = the root itself).
type CwdAddress struct {
	Root string `json:"root"`
	Path string `json:"path,omitempty"`
}

// ValidateIntentAgainstProfile checks everything of an intent except argv
// admission (see Admit and AdmitArgvByProfile), in field order:
// profileRef non-empty (profile-missing); cwd root one of AllowedRoots
// (root-not-allowed); cwd path valid with requireFile=false (path codes) and
// "" under RootOnly (cwd-not-allowed); env overrides (env codes; a repeated
// key is env-key-invalid; under ProfileDefaultsOnly any override, under
// AllowlistedOverrides an unlisted one: env-override-not-allowed);
// timeoutSeconds in 1..MaxTimeoutSeconds (timeout-invalid below,
// timeout-above-max above); outputBytes in 1..MaxOutputBytes
// (output-cap-invalid below, output-cap-above-max above). A caller that wants
// "0 means the profile maximum" applies ApplyIntentDefaults first.
func ValidateIntentAgainstProfile(p Profile, in CommandIntent) []*Refusal {
	var rs []*Refusal
	if in.ProfileRef == "" {
		rs = append(rs, Refuse(CodeProfileMissing, "spec.profileRef", "must name a command profile"))
	} else if len(in.ProfileRef) > MaxProfileRefBytes {
		rs = append(rs, Refuse(CodeProfileMissing, "spec.profileRef", "must not be longer than %d bytes", MaxProfileRefBytes))
	}
	rs = append(rs, validateCwd(p, in.Cwd, "spec.cwd")...)
	rs = append(rs, validateOverrides(p, in.Env, "spec.env")...)
	switch {
	case in.TimeoutSeconds < 1:
		rs = append(rs, Refuse(CodeTimeoutInvalid, "spec.timeoutSeconds", "must be at least 1 (got %d)", in.TimeoutSeconds))
	case in.TimeoutSeconds > p.MaxTimeoutSeconds:
		rs = append(rs, Refuse(CodeTimeoutAboveMax, "spec.timeoutSeconds", "must not exceed the profile maximum %d (got %d)", p.MaxTimeoutSeconds, in.TimeoutSeconds))
	}
	switch {
	case in.OutputBytes < 1:
		rs = append(rs, Refuse(CodeOutputCapInvalid, "spec.outputBytes", "must be at least 1 (got %d)", in.OutputBytes))
	case in.OutputBytes > p.MaxOutputBytes:
		rs = append(rs, Refuse(CodeOutputCapAboveMax, "spec.outputBytes", "must not exceed the profile maximum %d (got %d)", p.MaxOutputBytes, in.OutputBytes))
	}
	return rs
}

// ApplyIntentDefaults returns in with a zero TimeoutSeconds or OutputBytes
// replaced by the profile maximum. Negative values are left for validation
// to refuse.
func ApplyIntentDefaults(p Profile, in CommandIntent) CommandIntent {
	if in.TimeoutSeconds == 0 {
		in.TimeoutSeconds = p.MaxTimeoutSeconds
	}
	if in.OutputBytes == 0 {
		in.OutputBytes = p.MaxOutputBytes
	}
	return in
}

// validateCwd checks a cwd address against a profile's roots and policy.
func validateCwd(p Profile, cwd CwdAddress, field string) []*Refusal {
	var rs []*Refusal
	rootField := fieldJoin(field, "root")
	switch {
	case cwd.Root == "":
		rs = append(rs, Refuse(CodeRootNotAllowed, rootField, "must name one of the profile's allowed roots"))
	case !slices.Contains(p.AllowedRoots, cwd.Root):
		rs = append(rs, Refuse(CodeRootNotAllowed, rootField, "must be one of the profile's allowed roots %v (got %q)", p.AllowedRoots, truncateForMessage(cwd.Root)))
	}
	pathField := fieldJoin(field, "path")
	if r := ValidateRelativePath(cwd.Path, false); r != nil {
		r.Field = pathField
		rs = append(rs, r)
	} else {
		switch p.CwdPolicy {
		case CwdBeneathRoot:
		case CwdRootOnly:
			if cwd.Path != "" {
				rs = append(rs, Refuse(CodeCwdNotAllowed, pathField, "must be empty: the profile's cwd policy is %q", CwdRootOnly))
			}
		default:
			rs = append(rs, Refuse(CodeCwdNotAllowed, pathField, "must not be used: the profile's cwd policy %q is unknown", truncateForMessage(string(p.CwdPolicy))))
		}
	}
	return rs
}

// AdmitArgvByProfile decides whether the profile alone admits argv:
// argv[0] == Executable, then FixedArgs exactly, then every further atom has
// one of AllowedArgPrefixes as a prefix (no prefixes: no further atoms).
// A refusal of ValidateArgvShape comes first (argv-invalid, shell-string);
// otherwise the refusal is argv-not-admitted naming the first failing index
// (len(argv) when a fixed argument is missing).
func AdmitArgvByProfile(p Profile, argv []string) *Refusal {
	if r := FirstRefusal(ValidateArgvShape(argv)); r != nil {
		return r
	}
	if argv[0] != p.Executable {
		return Refuse(CodeArgvNotAdmitted, "spec.argv[0]", "must be the profile executable %q", truncateForMessage(p.Executable))
	}
	for i, fa := range p.FixedArgs {
		idx := i + 1
		if idx >= len(argv) {
			return Refuse(CodeArgvNotAdmitted, fieldIndex("spec.argv", idx), "must be the fixed argument %q (missing)", truncateForMessage(fa))
		}
		if argv[idx] != fa {
			return Refuse(CodeArgvNotAdmitted, fieldIndex("spec.argv", idx), "must be the fixed argument %q", truncateForMessage(fa))
		}
	}
	if i := firstUnprefixed(argv, 1+len(p.FixedArgs), p.AllowedArgPrefixes); i >= 0 {
		if len(p.AllowedArgPrefixes) == 0 {
			return Refuse(CodeArgvNotAdmitted, fieldIndex("spec.argv", i), "must not be present: the profile admits no variable atoms")
		}
		return Refuse(CodeArgvNotAdmitted, fieldIndex("spec.argv", i), "must start with one of the allowed prefixes %q", p.AllowedArgPrefixes)
	}
	return nil
}

// firstUnprefixed returns the index of the first atom at or after from that
// has none of prefixes as a prefix, or -1.
func firstUnprefixed(argv []string, from int, prefixes []string) int {
	for i := from; i < len(argv); i++ {
		if !hasAnyPrefix(argv[i], prefixes) {
			return i
		}
	}
	return -1
}

func hasAnyPrefix(a string, prefixes []string) bool {
	for _, p := range prefixes {
		if p != "" && strings.HasPrefix(a, p) {
			return true
		}
	}
	return false
}
