package actuation

import "slices"

// ContextClass is the sensorium-operational-context.v1 impact class of an
// environment (decisions 40 and 48), ordered
// experimental < research < test < production < critical.
type ContextClass string

// Operational context classes, in increasing order.
const (
	ContextExperimental ContextClass = "experimental"
	ContextResearch     ContextClass = "research"
	ContextTest         ContextClass = "test"
	ContextProduction   ContextClass = "production"
	ContextCritical     ContextClass = "critical"
)

// MaxSummaryBytes bounds the untrusted context summary.
const MaxSummaryBytes = 512

// contextClasses are the classes in increasing order.
var contextClasses = []ContextClass{ContextExperimental, ContextResearch, ContextTest, ContextProduction, ContextCritical}

// ContextClasses returns the classes in increasing order.
func ContextClasses() []ContextClass { return slices.Clone(contextClasses) }

// contextRank is the position of c in ContextClasses, or -1.
func contextRank(c ContextClass) int { return slices.Index(contextClasses, c) }

// ValidateOperationalContext checks a candidate context: a known class
// (vocabulary-unknown; an empty class is unknown, since missing context fails
// closed) and a summary of at most MaxSummaryBytes (summary-too-large).
func ValidateOperationalContext(class ContextClass, summary string) []*Refusal {
	var rs []*Refusal
	if contextRank(class) < 0 {
		rs = append(rs, Refuse(CodeVocabularyUnknown, "class", "must be one of %q (got %q)", ContextClasses(), truncateForMessage(string(class))))
	}
	if len(summary) > MaxSummaryBytes {
		rs = append(rs, Refuse(CodeSummaryTooLarge, "summary", "must not be longer than %d bytes (got %d)", MaxSummaryBytes, len(summary)))
	}
	return rs
}

// contextDigestInput is the exact document behind ContextDigest.
type contextDigestInput struct {
	Class   ContextClass `json:"class"`
	Summary string       `json:"summary"`
}

// ContextDigest digests a candidate operational context {"class","summary"};
// a Plan binds it as CandidateContextDigest. It digests the pre-policy
// candidate, so it need not equal the digest of the effective context.
func ContextDigest(class ContextClass, summary string) string {
	return mustDigest(contextDigestInput{Class: class, Summary: summary})
}

// MaxContext returns the highest of the given classes, or "" when any of
// them is unknown (missing context fails closed rather than being guessed).
func MaxContext(classes ...ContextClass) ContextClass {
	best := -1
	for _, c := range classes {
		r := contextRank(c)
		if r < 0 {
			return ""
		}
		best = max(best, r)
	}
	if best < 0 {
		return ""
	}
	return contextClasses[best]
}

// EffectiveContext returns max(candidate, floor), where the policy floor is
// "test" when networkProfile is neither "none" nor "" or
// hostFilesystemSharing is neither "denied" nor "" (decision 48), and
// otherwise no floor. Policy only raises, never lowers. An unknown candidate
// yields "" (which ValidateOperationalContext refuses); attached-resource
// classes are folded in with MaxContext.
func EffectiveContext(candidate ContextClass, networkProfile, hostFilesystemSharing string) ContextClass {
	if contextRank(candidate) < 0 {
		return ""
	}
	floorApplies := (networkProfile != "" && networkProfile != "none") ||
		(hostFilesystemSharing != "" && hostFilesystemSharing != "denied")
	if floorApplies {
		return MaxContext(candidate, ContextTest)
	}
	return candidate
}

// Plan is the normalized, immutable allocation input of an environment:
// selected backend, requirement, capability evidence, effective operational
// context, image and resources. PlanDigest binds all of it.
type Plan struct {
	BackendID              string       `json:"backendID"`
	Requirement            Requirement  `json:"requirement"`
	CapabilityRef          string       `json:"capabilityRef"`
	CapabilityDigest       string       `json:"capabilityDigest"`
	EffectiveContext       ContextClass `json:"effectiveContext"`
	CandidateContextDigest string       `json:"candidateContextDigest"`
	PolicyRef              string       `json:"policyRef,omitempty"` // the policy that derived the effective context (seed 000 §7.1)
	ImageRef               string       `json:"imageRef"`
	VCPUs                  int32        `json:"vcpus"`
	MemoryMiB              int32        `json:"memoryMiB"`
	DiskMiB                int32        `json:"diskMiB"`
	PIDs                   int32        `json:"pids"`
}

// PlanDigest digests a plan; the requirement's device classes are a set and
// are sorted first.
func PlanDigest(p Plan) string {
	p.Requirement.DeviceClasses = sortedCopy(p.Requirement.DeviceClasses)
	return mustDigest(p)
}
