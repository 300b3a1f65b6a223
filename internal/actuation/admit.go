package actuation

import "slices"

// Verdict is the outcome of the whole admission pipeline for one command.
type Verdict string

// Verdicts of AdmitCommand.
const (
	// VerdictAdmitted: the profile or a consent entry admits the command as it is.
	VerdictAdmitted Verdict = "Admitted"
	// VerdictNeedsConsent: nothing admits the argv yet, and an operator could approve it
	// (the refusal is consent-required). Whoever decides the command holds it and asks.
	VerdictNeedsConsent Verdict = "NeedsConsent"
	// VerdictRefused: no operator can make this command run (a malformed intent, another
	// executable, a deny entry, a lapsed grant that was the only admission).
	VerdictRefused Verdict = "Refused"
)

// GrantCheck refuses a consent entry whose grant no longer holds where it is checked (nil:
// it holds). The node agent checks the ConsentGrant itself (expiry, revocation) before a
// grant's entry admits a command there; a nil GrantCheck trusts the projected entries.
type GrantCheck func(e ConsentEntry) *Refusal

// Decision is AdmitCommand's answer.
type Decision struct {
	Verdict Verdict
	// Admission is the argv decision (By, Scope) of an admitted command, or the deciding
	// entry of a refusal by a deny entry.
	Admission
	// Refusal is set unless Verdict is VerdictAdmitted (consent-required for NeedsConsent).
	Refusal *Refusal
	// Malformed: refused by the intent's own shape or by its profile's caps, cwd or env
	// policy — what the admission webhook refuses at create time. Problems lists every such
	// refusal (Refusal is the first).
	Malformed bool
	Problems  []*Refusal
	// Lapsed: a grant that would have admitted the command no longer holds (GrantCheck),
	// and nothing else admits it; Refusal is that grant's (consent-expired or
	// consent-revoked).
	Lapsed bool
}

// AdmitCommand is the whole admission pipeline of a TerminalCommand, in one place: the
// argv's shape and the intent's caps, cwd and env against the profile
// (ValidateArgvShape, ValidateIntentAgainstProfile); then the argv against the profile and
// the consent entries bound to the subject (AdmitSubject: environment, operational
// context, allow-once binding to the command object and argv digest); then every admitting
// grant held to live (AdmitLive). The admission webhook (profile only, refusing what is
// Malformed), the manager's gate and the node agent (before it starts anything) all call
// it; none of them assembles these steps itself.
func AdmitCommand(p Profile, grants []ConsentEntry, in CommandIntent, s Subject, live GrantCheck) Decision {
	if refs := append(ValidateArgvShape(in.Argv), ValidateIntentAgainstProfile(p, in)...); len(refs) > 0 {
		return Decision{Verdict: VerdictRefused, Refusal: refs[0], Malformed: true, Problems: refs}
	}
	adm, lapsed := AdmitLive(p, grants, in, s, live)
	switch {
	case adm.Admitted:
		return Decision{Verdict: VerdictAdmitted, Admission: adm}
	case lapsed != nil:
		return Decision{Verdict: VerdictRefused, Admission: adm, Refusal: lapsed, Lapsed: true}
	case adm.Refusal != nil && adm.Refusal.Code == CodeConsentRequired:
		return Decision{Verdict: VerdictNeedsConsent, Admission: adm, Refusal: adm.Refusal}
	case adm.Refusal == nil:
		adm.Refusal = Refuse(CodeArgvNotAdmitted, "spec.argv", "argv is not admitted")
	}
	return Decision{Verdict: VerdictRefused, Admission: adm, Refusal: adm.Refusal}
}

// AdmitLive is AdmitSubject with every admitting grant held to live: an entry whose grant
// lapsed is set aside and admission decided again without it (another grant or the profile
// may still admit). It returns the admission and, when nothing admitted after a grant was
// set aside, the refusal of the last lapsed grant. At most len(entries)+1 rounds.
func AdmitLive(p Profile, entries []ConsentEntry, in CommandIntent, s Subject, live GrantCheck) (Admission, *Refusal) {
	var lapsed *Refusal
	for range len(entries) + 1 {
		adm := AdmitSubject(p, entries, in, s)
		if !adm.Admitted || adm.By == AdmittedByProfile || live == nil {
			return adm, lapsed
		}
		i := slices.IndexFunc(entries, func(e ConsentEntry) bool { return e.GrantRef == adm.By })
		if i < 0 {
			return adm, lapsed
		}
		r := live(entries[i])
		if r == nil {
			return adm, nil
		}
		lapsed = r
		entries = slices.Delete(slices.Clone(entries), i, i+1)
	}
	return Admission{Refusal: lapsed}, lapsed
}
