package actions

import (
	"encoding/json"
	"fmt"
	"slices"

	"sensorium.dev/workbench/internal/actuation"
)

// Signer is a trusted catalog signer (the API's ActionSigner).
type Signer struct {
	Name       string   `json:"name"`
	PublicKey  string   `json:"publicKey"`
	Namespaces []string `json:"namespaces"`
	Classes    []Class  `json:"classes"`
}

// Signature is a catalog's detached signature.
type Signature struct {
	SignerRef  string `json:"signerRef"`
	SpecDigest string `json:"specDigest"`
	Value      string `json:"value"`
}

// Posture values.
const (
	PostureNormal    = "Normal"
	PostureEmergency = "Emergency"
)

// Signature policies.
const (
	SignatureStrict    = "Strict"
	SignatureBootstrap = "Bootstrap"
)

// Exception lets one action run under Emergency posture.
type Exception struct {
	Namespace string `json:"namespace"`
	Catalog   string `json:"catalogRef"`
	ActionID  string `json:"actionId"`
}

// Policy is host policy (the API's WorkbenchPolicy spec); the zero value is Normal and
// Strict.
type Policy struct {
	Posture             string      `json:"posture,omitempty"`
	SignaturePolicy     string      `json:"signaturePolicy,omitempty"`
	EmergencyExceptions []Exception `json:"emergencyExceptions,omitempty"`
}

// Authorization states of a catalog or action.
const (
	StateAuthorized   = "Authorized"
	StateUnauthorized = "Unauthorized"
	StateBootstrap    = "Bootstrap"
)

// CatalogVerdict is the signature verdict of a whole catalog.
type CatalogVerdict struct {
	State   string         // Authorized, Unauthorized or Bootstrap
	Code    actuation.Code // why Unauthorized
	Message string
	Signer  *Signer // the signer whose signature verified
}

// VerifyCatalog decides a catalog's signature: digest is SpecDigestJSON of its spec. A
// missing signature is Bootstrap under signature policy Bootstrap and
// action-catalog-unauthorized under Strict; a present signature must name a known signer
// (catalog-signer-unknown) allowed for namespace (catalog-signer-out-of-scope) and verify
// over the current digest (action-catalog-unauthorized otherwise, under either policy: a
// stale signature is never tolerated).
func VerifyCatalog(namespace, digest string, sig *Signature, signers []Signer, pol Policy) CatalogVerdict {
	if sig == nil || (sig.SignerRef == "" && sig.Value == "") {
		if pol.SignaturePolicy == SignatureBootstrap {
			return CatalogVerdict{State: StateBootstrap, Message: "unsigned catalog tolerated by signature policy Bootstrap; runs are recorded unauthorized"}
		}
		return CatalogVerdict{State: StateUnauthorized, Code: actuation.CodeActionCatalogUnauthorized, Message: "catalog is not signed (signature policy Strict)"}
	}
	i := slices.IndexFunc(signers, func(s Signer) bool { return s.Name == sig.SignerRef })
	if i < 0 {
		return CatalogVerdict{State: StateUnauthorized, Code: actuation.CodeCatalogSignerUnknown, Message: fmt.Sprintf("signature names signer %q, which is not an ActionSigner", clip(sig.SignerRef))}
	}
	s := signers[i]
	if !slices.Contains(s.Namespaces, namespace) && !slices.Contains(s.Namespaces, "*") {
		return CatalogVerdict{State: StateUnauthorized, Code: actuation.CodeCatalogSignerOutOfScope, Message: fmt.Sprintf("signer %q may not sign catalogs in namespace %q", s.Name, namespace)}
	}
	if sig.SpecDigest != "" && sig.SpecDigest != digest {
		return CatalogVerdict{State: StateUnauthorized, Code: actuation.CodeActionCatalogUnauthorized, Message: fmt.Sprintf("signature covers %s but the spec is now %s: the catalog changed after signing", sig.SpecDigest, digest)}
	}
	if err := Verify(s.PublicKey, digest, sig.Value); err != nil {
		return CatalogVerdict{State: StateUnauthorized, Code: actuation.CodeActionCatalogUnauthorized, Message: fmt.Sprintf("signature of signer %q over %s: %v", s.Name, digest, err)}
	}
	return CatalogVerdict{State: StateAuthorized, Signer: &s, Message: "signed by " + s.Name}
}

// ActionVerdict narrows a catalog verdict to one action: a signer authorizes only the
// classes it lists (catalog-signer-out-of-scope for others), and an action with a signing
// block only when its named signer is the one whose signature verified
// (signing-signer-mismatch).
func ActionVerdict(v CatalogVerdict, a *Action) CatalogVerdict {
	if v.State == StateAuthorized && !slices.Contains(v.Signer.Classes, a.Class) {
		return CatalogVerdict{State: StateUnauthorized, Code: actuation.CodeCatalogSignerOutOfScope, Signer: v.Signer,
			Message: fmt.Sprintf("signer %q may not authorize class %s (%s)", v.Signer.Name, a.Class, SeedName(a.Class))}
	}
	return signingVerdict(v, a)
}

// PostureBlocks returns emergency-policy-blocked when posture is Emergency, the action's
// class is C3..C6 and no exception names (namespace, catalog, action).
func PostureBlocks(pol Policy, namespace, catalog string, a *Action) *actuation.Refusal {
	if pol.Posture != PostureEmergency {
		return nil
	}
	switch a.Class {
	case ClassScopedFSWrite, ClassEgressNetwork, ClassArtifactProducing, ClassComposed:
	default:
		return nil
	}
	for _, e := range pol.EmergencyExceptions {
		if e.Namespace == namespace && e.Catalog == catalog && e.ActionID == a.ID {
			return nil
		}
	}
	return actuation.Refuse(actuation.CodeEmergencyPolicyBlocked, "", "posture is Emergency: class %s (%s) is refused unless WorkbenchPolicy names action %q of catalog %s/%s as an exception",
		a.Class, SeedName(a.Class), clip(a.ID), namespace, catalog)
}

// AuthorizeInput is everything a dispatch decision reads.
type AuthorizeInput struct {
	Namespace   string
	CatalogName string
	// SpecJSON is json.Marshal of the API's ActionCatalogSpec.
	SpecJSON  []byte
	Signature *Signature
	Signers   []Signer
	Policy    Policy
	ActionID  string
	// Params are the run's parameters (nil = {}).
	Params json.RawMessage
	// TimeoutSeconds is the run's requested timeout (0 = the action's default).
	TimeoutSeconds int64
	// ExpectedSpecDigest, when set, must equal the current digest.
	ExpectedSpecDigest string
	// Signing is the run's request of the action's signer grant (nil = none).
	Signing *SigningRequest
}

// Decision is the verdict on one run. Allowed runs carry the action, the rendered argv and
// environment and the effective timeout.
type Decision struct {
	Allowed bool
	Refusal *actuation.Refusal
	// Unauthorized is true for a run allowed by signature policy Bootstrap on an unsigned
	// catalog.
	Unauthorized   bool
	SpecDigest     string
	Signer         string
	Action         *Action
	Argv           []string
	Env            []actuation.EnvVar
	ParamsDigest   string
	TimeoutSeconds int64
	// Observation is the run's declared observation (ObservationOf with nothing observed yet).
	Observation Observation
}

// Authorize decides a run, in order: the request names a catalog and action
// (directive-missing), the spec decodes, the action exists (action-not-allowlisted) and is
// structurally valid, the proposer's pinned digest matches (allowlist-catalog-mismatch),
// the signature and signer scope authorize it (a signing block's signer included), the
// signing request is within the action's grant, posture admits its class, the timeout is
// within the action's maximum, and the parameters validate and render. The manager calls
// it at admission and the node agent again immediately before spawn.
func Authorize(in AuthorizeInput) Decision {
	refuse := func(r *actuation.Refusal) Decision { return Decision{Refusal: r} }
	if in.CatalogName == "" || in.ActionID == "" {
		return refuse(actuation.Refuse(actuation.CodeDirectiveMissing, "spec", "must name a catalog and an action"))
	}
	cat, digest, err := ParseCatalog(in.SpecJSON)
	if err != nil {
		return refuse(actuation.Refuse(actuation.CodeActionCatalogUnauthorized, "spec", "catalog %s does not decode: %v", in.CatalogName, err))
	}
	d := Decision{SpecDigest: digest}
	a := cat.Find(in.ActionID)
	if a == nil {
		d.Refusal = actuation.Refuse(actuation.CodeActionNotAllowlisted, "spec.actionId", "catalog %s declares no action %q", in.CatalogName, clip(in.ActionID))
		return d
	}
	if rs := ActionRefusals(cat, in.ActionID); len(rs) > 0 {
		d.Refusal = rs[0]
		return d
	}
	if in.ExpectedSpecDigest != "" && in.ExpectedSpecDigest != digest {
		d.Refusal = actuation.Refuse(actuation.CodeAllowlistCatalogMismatch, "spec.expectedSpecDigest", "catalog %s is now %s, not %s", in.CatalogName, digest, in.ExpectedSpecDigest)
		return d
	}
	v := ActionVerdict(VerifyCatalog(in.Namespace, digest, in.Signature, in.Signers, in.Policy), a)
	switch v.State {
	case StateUnauthorized:
		d.Refusal = actuation.Refuse(v.Code, "signature", "%s", v.Message)
		return d
	case StateBootstrap:
		d.Unauthorized = true
	default:
		d.Signer = v.Signer.Name
	}
	if r := SigningRefusal(a, in.Signing); r != nil {
		d.Refusal = r
		return d
	}
	if r := PostureBlocks(in.Policy, in.Namespace, in.CatalogName, a); r != nil {
		d.Refusal = r
		return d
	}
	d.TimeoutSeconds = a.DefaultTimeoutSeconds
	if in.TimeoutSeconds != 0 {
		if in.TimeoutSeconds < 0 {
			d.Refusal = actuation.Refuse(actuation.CodeTimeoutInvalid, "spec.timeoutSeconds", "must be positive")
			return d
		}
		if in.TimeoutSeconds > a.MaxTimeoutSeconds {
			d.Refusal = actuation.Refuse(actuation.CodeTimeoutAboveMax, "spec.timeoutSeconds", "must be at most the action's maxTimeoutSeconds (%d)", a.MaxTimeoutSeconds)
			return d
		}
		d.TimeoutSeconds = in.TimeoutSeconds
	}
	argv, env, r := Render(a, in.Params)
	if r != nil {
		d.Refusal = r
		return d
	}
	canon, _ := ValidateParams(a, in.Params)
	d.ParamsDigest = digestOf(canon)
	d.Allowed, d.Action, d.Argv, d.Env = true, a, argv, env
	d.Observation = ObservationOf(a, Observed{})
	return d
}

func digestOf(canon []byte) string {
	s, _ := SpecDigestJSON(canon)
	return s
}

// ActionState is the manager's per-action status line.
type ActionState struct {
	ID            string
	Class         Class
	Authorization string
	Code          actuation.Code
	Message       string
}

// CatalogStates returns the authorization of every declared action: structural refusals
// first (invalid declarations are not part of the effective catalog), then the signature
// verdict narrowed by class.
func CatalogStates(namespace string, cat Catalog, digest string, sig *Signature, signers []Signer, pol Policy) (CatalogVerdict, []ActionState) {
	v := VerifyCatalog(namespace, digest, sig, signers, pol)
	out := make([]ActionState, 0, len(cat.Actions))
	seen := map[string]bool{}
	for i := range cat.Actions {
		a := &cat.Actions[i]
		if seen[a.ID] {
			continue
		}
		seen[a.ID] = true
		st := ActionState{ID: a.ID, Class: a.Class}
		if rs := ActionRefusals(cat, a.ID); len(rs) > 0 {
			st.Authorization, st.Code, st.Message = StateUnauthorized, rs[0].Code, rs[0].Error()
		} else {
			av := ActionVerdict(v, a)
			st.Authorization, st.Code, st.Message = av.State, av.Code, av.Message
		}
		out = append(out, st)
	}
	return v, out
}
