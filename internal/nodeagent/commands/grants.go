package commands

import (
	"context"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// Grants are checked where they are used (issue 25 item 8). The manager projects active
// consent grants into a profile's status and drops them when they expire or are revoked,
// but the node starts the command: it does not wait for that projection. Before a grant's
// entry admits a command here, the node checks the entry's own expiry (carried in the
// projection) and reads the ConsentGrant itself from the API server — it must still exist
// as the grant the entry names, not be revoked, and not be past its expiry — and the core
// matches an entry only on the environment object (UID) it was reviewed on.

// grantCheck refuses the entry whose grant no longer holds (nil: it holds).
type grantCheck = actuation.GrantCheck

// admitLive is actuation.AdmitLive (the core's loop that holds every admitting grant to live).
func admitLive(core actuation.Profile, entries []actuation.ConsentEntry, in actuation.CommandIntent, s actuation.Subject, live grantCheck) (actuation.Admission, *actuation.Refusal) {
	return actuation.AdmitLive(core, entries, in, s, live)
}

// liveGrant is the node's grantCheck for a namespace: the entry's projected expiry, then
// the ConsentGrant as the API server has it now (not a cache: a revocation just written is
// seen). A read that fails for another reason than absence refuses too (fail closed): the
// command is not started on a grant the node could not confirm.
func (r *Room) liveGrant(ctx context.Context, ns string) grantCheck {
	return func(e actuation.ConsentEntry) *actuation.Refusal {
		now := time.Now()
		if r := actuation.ConsentEntryLapsed(e, now); r != nil {
			return r
		}
		var g wbv1.ConsentGrant
		if err := r.d.Reader.Get(ctx, types.NamespacedName{Namespace: ns, Name: e.GrantRef}, &g); err != nil {
			if apierrors.IsNotFound(err) {
				return actuation.Refuse(actuation.CodeConsentRevoked, "grantRef", "grant %s no longer exists; it must not admit", e.GrantRef)
			}
			return actuation.Refuse(actuation.CodeConsentRevoked, "grantRef", "grant %s could not be confirmed at the node: %v", e.GrantRef, err)
		}
		return grantHolds(&g, now)
	}
}

// grantHolds refuses a grant that is revoked or past its own expiry now, whatever its
// status says yet; consumed allow-once grants are the manager's to bind (the entry names the
// command's UID).
func grantHolds(g *wbv1.ConsentGrant, now time.Time) *actuation.Refusal {
	switch {
	case g.Spec.Revoked != nil && *g.Spec.Revoked, g.Status.State == wbv1.ConsentGrantRevoked:
		return actuation.Refuse(actuation.CodeConsentRevoked, "grantRef", "grant %s was revoked; it must not admit", g.Name)
	case g.Spec.ExpiresAt != nil && !now.Before(g.Spec.ExpiresAt.Time), g.Status.State == wbv1.ConsentGrantExpired:
		return actuation.Refuse(actuation.CodeConsentExpired, "grantRef", "grant %s expired; it must not admit after its expiry", g.Name)
	case g.Spec.Scope == wbv1.ConsentDeny, g.Status.State == wbv1.ConsentGrantDenied, g.Status.State == wbv1.ConsentGrantUnbound:
		return actuation.Refuse(actuation.CodeConsentRevoked, "grantRef", "grant %s is %s; it must not admit", g.Name, g.Status.State)
	}
	return nil
}
