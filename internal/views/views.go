// Package views is the core of shared read-only terminal views (seed 003): which grant
// admits an observer, whether a view's environment binding still holds, and how a screen
// becomes a bounded latest-state frame. It knows nothing of Kubernetes; the admission
// webhooks, the node agent's stream and its status reconcilers all call it.
package views

import (
	"slices"
	"strings"
	"time"

	"sensorium.dev/workbench/internal/actuation"
)

// MaxGrantLifetime bounds a ViewGrant's expiresAt after its creation: observation rights are
// short-lived and are renewed by a new grant.
const MaxGrantLifetime = 24 * time.Hour

// RBACRecheckInterval bounds how old the membership (RBAC) decision behind a delivered frame
// may be: a stream re-asks SubjectAccessReview at least this often, and before any frame
// once the last answer is older.
const RBACRecheckInterval = 200 * time.Millisecond

// Subject kinds, as in ViewGrant.spec.subject.kind.
const (
	KindUser           = "User"
	KindGroup          = "Group"
	KindServiceAccount = "ServiceAccount"
)

// Subject is the one identity a grant names.
type Subject struct {
	Kind, Name, Namespace string
}

// Identity is an authenticated observer.
type Identity struct {
	User   string
	Groups []string
}

// Matches reports whether s names id exactly.
func (s Subject) Matches(id Identity) bool {
	switch s.Kind {
	case KindUser:
		return s.Name != "" && id.User == s.Name
	case KindGroup:
		return s.Name != "" && slices.Contains(id.Groups, s.Name)
	case KindServiceAccount:
		return s.Name != "" && s.Namespace != "" && id.User == "system:serviceaccount:"+s.Namespace+":"+s.Name
	}
	return false
}

// ValidateSubject refuses a subject that is not exactly one user, group or ServiceAccount.
func ValidateSubject(s Subject) *actuation.Refusal {
	switch {
	case s.Kind != KindUser && s.Kind != KindGroup && s.Kind != KindServiceAccount:
		return actuation.Refuse(actuation.CodeViewSubjectInvalid, "kind", "must be User, Group or ServiceAccount (got %q)", s.Kind)
	case s.Name == "" || strings.ContainsAny(s.Name, "\x00\n"):
		return actuation.Refuse(actuation.CodeViewSubjectInvalid, "name", "must be a non-empty identity name")
	case (s.Kind == KindServiceAccount) != (s.Namespace != ""):
		return actuation.Refuse(actuation.CodeViewSubjectInvalid, "namespace", "is required for a ServiceAccount and only for it")
	}
	return nil
}

// ValidateLifetime refuses an expiry in the past or beyond MaxGrantLifetime from now.
func ValidateLifetime(expiresAt, now time.Time) *actuation.Refusal {
	if !expiresAt.After(now) || expiresAt.Sub(now) > MaxGrantLifetime {
		return actuation.Refuse(actuation.CodeViewGrantLifetimeInvalid, "expiresAt", "must be in the future and within %s", MaxGrantLifetime)
	}
	return nil
}

// Grant is a ViewGrant as the decision needs it.
type Grant struct {
	Name      string
	ViewUID   string
	Subject   Subject
	ExpiresAt time.Time
	Revoked   bool
}

// State is a grant's own state at now: "" when active, else its code.
func (g Grant) State(now time.Time) actuation.Code {
	switch {
	case g.Revoked:
		return actuation.CodeViewGrantRevoked
	case !now.Before(g.ExpiresAt):
		return actuation.CodeViewGrantExpired
	}
	return ""
}

// Decide returns the grant admitting id to the view viewUID at now, or the code refusing
// it. Only grants stamped with that exact view UID count (a view recreated under the same
// name starts without grants). Among several, any active grant admits; otherwise the code
// says why the most telling one does not: revoked before expired before missing.
func Decide(grants []Grant, viewUID string, id Identity, now time.Time) (Grant, actuation.Code) {
	code := actuation.CodeViewGrantMissing
	for _, g := range grants {
		if viewUID == "" || g.ViewUID != viewUID || !g.Subject.Matches(id) {
			continue
		}
		switch c := g.State(now); c {
		case "":
			return g, ""
		case actuation.CodeViewGrantRevoked:
			code = c
		case actuation.CodeViewGrantExpired:
			if code != actuation.CodeViewGrantRevoked {
				code = c
			}
		}
	}
	return Grant{}, code
}

// Binding is the exact environment a view was admitted against (or the environment now).
type Binding struct {
	EnvironmentUID   string
	SourceGeneration int64
	Context          actuation.ContextClass
}

// CurrentContext is the environment's context now: the higher of the effective (policy)
// class and the declared one, "" when either is unknown (fails closed).
func CurrentContext(effective, declared actuation.ContextClass) actuation.ContextClass {
	switch {
	case effective == "" && declared == "":
		return ""
	case effective == "":
		return actuation.MaxContext(declared)
	case declared == "":
		return actuation.MaxContext(effective)
	}
	return actuation.MaxContext(effective, declared)
}

// CheckCeiling refuses a context above the view's classification ceiling, or a missing one.
func CheckCeiling(ctx, ceiling actuation.ContextClass) actuation.Code {
	if ctx == "" || actuation.MaxContext(ctx) == "" {
		return actuation.CodeViewContextMissing
	}
	if actuation.MaxContext(ctx, ceiling) != ceiling {
		return actuation.CodeViewClassificationExceeded
	}
	return ""
}

// CheckBinding compares the admitted binding with the environment now: a replaced
// environment, a new source generation or a changed operational context supersede the view.
func CheckBinding(bound, now Binding, ceiling actuation.ContextClass) actuation.Code {
	if c := CheckCeiling(bound.Context, ceiling); c != "" {
		return c
	}
	if now.EnvironmentUID != bound.EnvironmentUID || now.SourceGeneration != bound.SourceGeneration || now.Context != bound.Context {
		return actuation.CodeViewContextSuperseded
	}
	return ""
}

// BoundLines cuts lines so that their bytes (each plus a newline) fit maxBytes, never
// splitting a UTF-8 sequence. It reports whether anything was cut.
func BoundLines(lines []string, maxBytes int) ([]string, bool) {
	out := make([]string, 0, len(lines))
	used := 0
	for _, l := range lines {
		room := maxBytes - used - 1
		if room < 0 {
			return out, true
		}
		if len(l) > room {
			cut := room
			for cut > 0 && cut < len(l) && l[cut]&0xC0 == 0x80 {
				cut--
			}
			out = append(out, l[:cut])
			return out, true
		}
		out = append(out, l)
		used += len(l) + 1
	}
	return out, false
}
