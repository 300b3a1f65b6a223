package actions

import (
	"fmt"
	"regexp"
	"slices"

	"sensorium.dev/workbench/internal/actuation"
)

// Bounds of the seed's signing block (issue 30 item 6).
const (
	// MaxSigningDomains is the most domains one signing block lists.
	MaxSigningDomains = 8
	// MaxSignaturesBound is the largest maxSignatures a signing block may declare.
	MaxSignaturesBound = 16
)

// signingDomainRE is a domain tag such as git.commit.v1.
var signingDomainRE = regexp.MustCompile(`^[a-z][a-z0-9-]*(\.[a-z0-9][a-z0-9-]*)*$`)

// SigningRequest is what one run asks of its action's signer grant (the API's
// ActionRun spec.signing).
type SigningRequest struct {
	Domain     string `json:"domain"`
	Signatures int32  `json:"signatures"`
}

// validateSigning checks a signing block's structure: a signer named, 1..8 well-formed
// distinct domains, maxSignatures within 1..16.
func validateSigning(s *Signing, base string) []*actuation.Refusal {
	if s == nil {
		return nil
	}
	var rs []*actuation.Refusal
	if s.SignerRef == "" || len(s.SignerRef) > 253 {
		rs = append(rs, actuation.Refuse(actuation.CodeSigningBlockInvalid, base+".signerRef", "must name the ActionSigner (1..253 bytes)"))
	}
	switch s.KeyKind {
	case "", "primary-participant", "proxy", "derived":
	default:
		rs = append(rs, actuation.Refuse(actuation.CodeSigningBlockInvalid, base+".keyKind", "must be primary-participant, proxy or derived"))
	}
	if len(s.AllowedDomains) == 0 || len(s.AllowedDomains) > MaxSigningDomains {
		rs = append(rs, actuation.Refuse(actuation.CodeSigningBlockInvalid, base+".allowedDomains", "must list 1..%d domains", MaxSigningDomains))
	}
	for i, d := range s.AllowedDomains {
		if len(d) > 128 || !signingDomainRE.MatchString(d) {
			rs = append(rs, actuation.Refuse(actuation.CodeSigningBlockInvalid, fmt.Sprintf("%s.allowedDomains[%d]", base, i), "must be a domain tag such as git.commit.v1 (got %q)", clip(d)))
		} else if slices.Index(s.AllowedDomains, d) < i {
			rs = append(rs, actuation.Refuse(actuation.CodeSigningBlockInvalid, fmt.Sprintf("%s.allowedDomains[%d]", base, i), "must not repeat %q", d))
		}
	}
	if s.MaxSignatures < 1 || s.MaxSignatures > MaxSignaturesBound {
		rs = append(rs, actuation.Refuse(actuation.CodeSigningBlockInvalid, base+".maxSignatures", "must be within 1..%d (got %d)", MaxSignaturesBound, s.MaxSignatures))
	}
	return rs
}

// signingVerdict narrows an Authorized verdict by the action's signing block: the block's
// signer must be the one whose signature authorized the catalog (a Bootstrap, unsigned
// catalog authorizes no signer grant).
func signingVerdict(v CatalogVerdict, a *Action) CatalogVerdict {
	if a.Signing == nil || v.State == StateUnauthorized {
		return v
	}
	if v.State == StateBootstrap {
		return CatalogVerdict{State: StateUnauthorized, Code: actuation.CodeSigningSignerMismatch,
			Message: fmt.Sprintf("action %q declares a signer grant of %q, but the catalog is unsigned", clip(a.ID), clip(a.Signing.SignerRef))}
	}
	if v.Signer == nil || v.Signer.Name != a.Signing.SignerRef {
		got := ""
		if v.Signer != nil {
			got = v.Signer.Name
		}
		return CatalogVerdict{State: StateUnauthorized, Code: actuation.CodeSigningSignerMismatch, Signer: v.Signer,
			Message: fmt.Sprintf("action %q declares a signer grant of %q, but the catalog is signed by %q", clip(a.ID), clip(a.Signing.SignerRef), got)}
	}
	return v
}

// SigningRefusal decides a run's signing request against its action's block: a request
// needs a block listing its domain (signing-domain-not-allowed) and at most maxSignatures
// signatures (signing-max-signatures-exceeded). No request asks for nothing.
func SigningRefusal(a *Action, req *SigningRequest) *actuation.Refusal {
	if req == nil {
		return nil
	}
	if a.Signing == nil {
		return actuation.Refuse(actuation.CodeSigningDomainNotAllowed, "spec.signing", "action %q declares no signing block: no signature may be requested", clip(a.ID))
	}
	if !slices.Contains(a.Signing.AllowedDomains, req.Domain) {
		return actuation.Refuse(actuation.CodeSigningDomainNotAllowed, "spec.signing.domain", "action %q allows signing only in %v, not %q", clip(a.ID), a.Signing.AllowedDomains, clip(req.Domain))
	}
	if req.Signatures < 1 {
		return actuation.Refuse(actuation.CodeSigningMaxSignaturesExceeded, "spec.signing.signatures", "must be at least 1 (got %d)", req.Signatures)
	}
	if req.Signatures > a.Signing.MaxSignatures {
		return actuation.Refuse(actuation.CodeSigningMaxSignaturesExceeded, "spec.signing.signatures", "action %q allows at most %d signatures per run, not %d", clip(a.ID), a.Signing.MaxSignatures, req.Signatures)
	}
	return nil
}
