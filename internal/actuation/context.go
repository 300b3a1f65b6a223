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

// DefaultContext is the candidate of an environment that pins none: the current Workbench
// default is test (decision 48); a lower class is an explicit operator decision.
const DefaultContext = ContextTest

// CandidateContext is the candidate class an environment pins: its declared class, or
// DefaultContext when it declares none.
func CandidateContext(declared ContextClass) ContextClass {
	if declared == "" {
		return DefaultContext
	}
	return declared
}

// ContextFloor is the policy floor the selected capability imposes (decision 48): test
// when the environment can reach a network or shares the host's filesystem, otherwise the
// lowest class. It reads what the selected backend actually provides, not what the user
// required: hostFilesystemSharing is the capability's (one value per backend), and the
// network profile is the required one when the requirement names it (Match guarantees the
// capability offers it), otherwise any non-"none" profile the capability offers counts,
// since nothing then pins the environment to "none". Unknown or missing values count as
// sharing and networking (fail closed: the floor rises, never falls).
func ContextFloor(c Capability, req Requirement) ContextClass {
	networked := false
	switch {
	case req.NetworkProfile != "":
		networked = req.NetworkProfile != "none"
	case len(c.NetworkProfiles) == 0:
		networked = true
	default:
		networked = slices.ContainsFunc(c.NetworkProfiles, func(p string) bool { return p != "none" })
	}
	if networked || c.HostFilesystemSharing != "denied" {
		return ContextTest
	}
	return ContextExperimental
}

// PlanContext is the effective operational context of a plan: the highest of the
// environment's candidate (CandidateContext of its declared class), the selected
// capability's floor (ContextFloor) and every given earlier effective context (a re-plan
// never lowers what was published; "" entries are ignored). An unknown candidate yields ""
// (missing context fails closed; ValidateOperationalContext refuses it).
func PlanContext(declared ContextClass, c Capability, req Requirement, earlier ...ContextClass) ContextClass {
	classes := []ContextClass{CandidateContext(declared), ContextFloor(c, req)}
	for _, e := range earlier {
		if e != "" {
			classes = append(classes, e)
		}
	}
	return MaxContext(classes...)
}

// CheckContextChange is the only-rises rule for an update of an environment's declared
// operational context (seed 000: host policy may only raise the source declaration; a
// test -> production change is an immutable replacement of the publication). Both sides
// go through CandidateContext, so removing a declared class is lowering it to the
// default. A lower candidate is refused operational-context-lowered; unknown classes are
// left to ValidateOperationalContext.
func CheckContextChange(oldDeclared, newDeclared ContextClass) *Refusal {
	from, to := CandidateContext(oldDeclared), CandidateContext(newDeclared)
	rf, rt := contextRank(from), contextRank(to)
	if rf < 0 || rt < 0 || rt >= rf {
		return nil
	}
	return Refuse(CodeOperationalContextLowered, "class",
		"an environment's operational context may only rise: %q is below the current %q (create a new environment for a lower context)", to, from)
}

// CheckAdmissionContext says whether an admission recorded under the operational context
// admittedUnder still holds in the environment's current effective context: an admission
// (or a consent that led to it) made under another context must not be used under the new
// one without re-evaluation (operational-context-superseded). An admission that recorded
// no context ("") is not bound to one and holds.
func CheckAdmissionContext(admittedUnder, current ContextClass) *Refusal {
	if admittedUnder == "" || admittedUnder == current {
		return nil
	}
	return Refuse(CodeOperationalContextSuperseded, "status.admittedContext",
		"admitted under operational context %q, but the environment's context is now %q: the admission must be re-evaluated", admittedUnder, current)
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
