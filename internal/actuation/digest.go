package actuation

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/gowebpki/jcs"
)

// DigestPrefix starts every digest this package writes.
const DigestPrefix = "sha256:"

// CanonicalJSON encodes v with encoding/json and canonicalizes the result
// with RFC 8785 (JCS): sorted keys, no insignificant whitespace, ECMAScript
// number and string forms. encoding/json replaces invalid UTF-8 in strings
// with U+FFFD, so digest only validated values.
func CanonicalJSON(v any) ([]byte, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encoding value for canonical JSON: %w", err)
	}
	out, err := jcs.Transform(raw)
	if err != nil {
		return nil, fmt.Errorf("canonicalizing JSON: %w", err)
	}
	return out, nil
}

// Digest returns "sha256:<lowercase hex>" of CanonicalJSON(v).
func Digest(v any) (string, error) {
	b, err := CanonicalJSON(v)
	if err != nil {
		return "", err
	}
	return DigestBytes(b), nil
}

// DigestBytes returns "sha256:<lowercase hex>" of b as it is.
func DigestBytes(b []byte) string {
	sum := sha256.Sum256(b)
	return DigestPrefix + hex.EncodeToString(sum[:])
}

// IsDigest reports whether s has the form "sha256:" + 64 lowercase hex digits.
func IsDigest(s string) bool {
	h, ok := strings.CutPrefix(s, DigestPrefix)
	if !ok || len(h) != sha256.Size*2 {
		return false
	}
	for i := 0; i < len(h); i++ {
		if !((h[i] >= '0' && h[i] <= '9') || (h[i] >= 'a' && h[i] <= 'f')) {
			return false
		}
	}
	return true
}

// mustDigest digests values whose encoding cannot fail (plain structs of
// strings, integers and string slices).
func mustDigest(v any) string {
	d, err := Digest(v)
	if err != nil {
		panic("actuation: digest of a plain value failed: " + err.Error())
	}
	return d
}

// nonNil returns s, or an empty slice for nil, so that nil and empty digest
// alike ("[]").
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

// sortedCopy returns a sorted copy of a set-valued list (nil stays nil).
func sortedCopy(s []string) []string {
	if s == nil {
		return nil
	}
	c := slices.Clone(s)
	slices.Sort(c)
	return c
}

// argvDigestInput is the exact document behind ArgvDigest.
type argvDigestInput struct {
	Argv       []string   `json:"argv"`
	Cwd        CwdAddress `json:"cwd"`
	ProfileRef string     `json:"profileRef"`
}

// ArgvDigest digests {"argv","cwd","profileRef"}: the concrete command
// intent an operator reviews. A nil argv digests as []; an empty cwd path is
// omitted.
func ArgvDigest(profileRef string, argv []string, cwd CwdAddress) string {
	return mustDigest(argvDigestInput{Argv: nonNil(argv), Cwd: cwd, ProfileRef: profileRef})
}

// ProfileDigest digests a profile. Set-valued lists (allowedArgPrefixes,
// allowedRoots, env defaults by name, env allowedOverrides) are sorted first,
// so reordering them does not change the digest; fixedArgs keep their order.
func ProfileDigest(p Profile) string {
	p.AllowedRoots = nonNil(sortedCopy(p.AllowedRoots))
	p.AllowedArgPrefixes = sortedCopy(p.AllowedArgPrefixes)
	p.Env.AllowedOverrides = sortedCopy(p.Env.AllowedOverrides)
	if p.Env.Defaults != nil {
		d := slices.Clone(p.Env.Defaults)
		slices.SortStableFunc(d, func(a, b EnvVar) int { return strings.Compare(a.Name, b.Name) })
		p.Env.Defaults = d
	}
	return mustDigest(p)
}

// SafetyCaps are the safety envelope a consent delta binds.
type SafetyCaps struct {
	TimeoutSeconds int64  `json:"timeoutSeconds"`
	OutputBytes    int64  `json:"outputBytes"`
	Egress         string `json:"egress"`
	Credentials    string `json:"credentials"`
}

// ConsentDelta is the concrete intent a consent covers. It never holds
// mutable audit fields (times, operator, decision).
type ConsentDelta struct {
	Capability       string       `json:"capability"`      // e.g. "workbench.terminal.command"
	OperationDigest  string       `json:"operationDigest"` // the ArgvDigest
	Workspace        string       `json:"workspace"`       // namespace/environment
	Roots            []string     `json:"roots"`
	Scope            ConsentScope `json:"scope"`
	Argv             []string     `json:"argv,omitempty"`
	Prefix           []string     `json:"prefix,omitempty"`
	VariablePrefixes []string     `json:"variablePrefixes,omitempty"`
	SafetyCaps       SafetyCaps   `json:"safetyCaps"`
}

// ConsentDeltaDigest digests a delta. Roots and VariablePrefixes are sets and
// are sorted first; a nil Roots digests as [].
func ConsentDeltaDigest(d ConsentDelta) string {
	d.Roots = nonNil(sortedCopy(d.Roots))
	d.VariablePrefixes = sortedCopy(d.VariablePrefixes)
	return mustDigest(d)
}

// ApprovalRefPrefix starts every approval ref.
const ApprovalRefPrefix = "approval:consent:"

// ApprovalRef derives the approval ref of a delta digest:
// "approval:consent:" + deltaDigest.
func ApprovalRef(deltaDigest string) string { return ApprovalRefPrefix + deltaDigest }
