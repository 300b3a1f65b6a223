package skills

import (
	"regexp"
	"slices"
)

// SecretFinding locates a secret-shaped string; the value itself is never kept.
type SecretFinding struct {
	Kind  string `json:"kind"`
	Field string `json:"field"`
}

var secretPatterns = []struct {
	kind string
	re   *regexp.Regexp
}{
	{"aws-access-key-id", regexp.MustCompile(`\b(?:AKIA|ASIA|AGPA|AIDA|AROA|ANPA|ANVA|AIPA)[0-9A-Z]{16}\b`)},
	{"aws-secret-access-key", regexp.MustCompile(`(?i)aws_?secret_?access_?key["']?\s*[:=]\s*["']?[A-Za-z0-9/+=]{40}`)},
	{"github-token", regexp.MustCompile(`\bgh[pousr]_[A-Za-z0-9]{36,255}\b`)},
	{"github-fine-grained-token", regexp.MustCompile(`\bgithub_pat_[A-Za-z0-9_]{22,255}\b`)},
	{"gitlab-token", regexp.MustCompile(`\bglpat-[A-Za-z0-9_-]{20,}\b`)},
	{"slack-token", regexp.MustCompile(`\bxox[abposr]-[A-Za-z0-9-]{10,}\b`)},
	{"google-api-key", regexp.MustCompile(`\bAIza[0-9A-Za-z_-]{35}\b`)},
	{"openai-style-key", regexp.MustCompile(`\bsk-(?:proj-|ant-)?[A-Za-z0-9_-]{20,}\b`)},
	{"private-key-pem", regexp.MustCompile(`-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----`)},
	{"jwt", regexp.MustCompile(`\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}`)},
	{"bearer-token", regexp.MustCompile(`(?i)\bauthorization:\s*bearer\s+[A-Za-z0-9._~+/=-]{16,}`)},
	{"password-assignment", regexp.MustCompile(`(?i)(?:password|passwd|pwd|passphrase|secret|api[_-]?key|access[_-]?token|auth[_-]?token)["']?\s*[:=]\s*["']?[^\s"']{6,}`)},
	{"url-credentials", regexp.MustCompile(`\b[a-z][a-z0-9+.-]*://[^/\s:@]+:[^/\s:@]{3,}@`)},
}

// DetectSecrets scans text for common secret shapes and returns the kinds
// found (sorted, unique) with field as their location.
func DetectSecrets(field, text string) []SecretFinding {
	var out []SecretFinding
	for _, p := range secretPatterns {
		if p.re.MatchString(text) {
			out = append(out, SecretFinding{Kind: p.kind, Field: field})
		}
	}
	return out
}

// SecretKinds lists the detector's kinds.
func SecretKinds() []string {
	out := make([]string, 0, len(secretPatterns))
	for _, p := range secretPatterns {
		out = append(out, p.kind)
	}
	slices.Sort(out)
	return out
}
