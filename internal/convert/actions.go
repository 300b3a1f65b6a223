package convert

import (
	"context"
	"encoding/json"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
)

// ActionSpecJSON is the encoding of a catalog spec the signature covers (see
// actions.SpecDigestJSON): encoding/json of the API type, nothing else.
func ActionSpecJSON(spec *wbv1.ActionCatalogSpec) ([]byte, error) {
	b, err := json.Marshal(spec)
	if err != nil {
		return nil, fmt.Errorf("encoding catalog spec: %w", err)
	}
	return b, nil
}

// ActionCatalogSpec encodes a core catalog as an API catalog spec (the inverse of
// ActionCatalog: the types share their JSON field names).
func ActionCatalogSpec(c actions.Catalog) (wbv1.ActionCatalogSpec, error) {
	var spec wbv1.ActionCatalogSpec
	b, err := json.Marshal(c)
	if err != nil {
		return spec, fmt.Errorf("encoding catalog: %w", err)
	}
	if err := json.Unmarshal(b, &spec); err != nil {
		return spec, fmt.Errorf("decoding catalog spec: %w", err)
	}
	return spec, nil
}

// ActionCatalog decodes an API catalog into the core's catalog and its spec digest.
func ActionCatalog(cat *wbv1.ActionCatalog) (actions.Catalog, string, error) {
	b, err := ActionSpecJSON(&cat.Spec)
	if err != nil {
		return actions.Catalog{}, "", err
	}
	c, d, err := actions.ParseCatalog(b)
	if err != nil {
		return actions.Catalog{}, "", fmt.Errorf("decoding catalog %s/%s: %w", cat.Namespace, cat.Name, err)
	}
	return c, d, nil
}

// ActionSignature converts a catalog's signature (nil stays nil).
func ActionSignature(s *wbv1.CatalogSignature) *actions.Signature {
	if s == nil {
		return nil
	}
	return &actions.Signature{SignerRef: s.SignerRef, SpecDigest: string(s.SpecDigest), Value: s.Value}
}

// ActionSigners converts the trusted signers.
func ActionSigners(list []wbv1.ActionSigner) []actions.Signer {
	out := make([]actions.Signer, 0, len(list))
	for i := range list {
		s := &list[i]
		cs := make([]actions.Class, 0, len(s.Spec.Classes))
		for _, c := range s.Spec.Classes {
			cs = append(cs, actions.Class(c))
		}
		out = append(out, actions.Signer{Name: s.Name, PublicKey: s.Spec.PublicKey, Namespaces: s.Spec.Namespaces, Classes: cs})
	}
	return out
}

// ActionPolicy converts the WorkbenchPolicy singleton; nil (absent) is Normal and Strict.
func ActionPolicy(p *wbv1.WorkbenchPolicy) actions.Policy {
	if p == nil {
		return actions.Policy{Posture: actions.PostureNormal, SignaturePolicy: actions.SignatureStrict}
	}
	out := actions.Policy{Posture: string(p.Spec.Posture), SignaturePolicy: string(p.Spec.SignaturePolicy)}
	for _, e := range p.Spec.EmergencyExceptions {
		out.EmergencyExceptions = append(out.EmergencyExceptions, actions.Exception{Namespace: e.Namespace, Catalog: string(e.CatalogRef), ActionID: e.ActionID})
	}
	return out
}

// ActionAuthority reads what authorizes catalogs: every ActionSigner and the WorkbenchPolicy
// singleton (absent = nil).
func ActionAuthority(ctx context.Context, r client.Reader) ([]wbv1.ActionSigner, *wbv1.WorkbenchPolicy, error) {
	var signers wbv1.ActionSignerList
	if err := r.List(ctx, &signers); err != nil {
		return nil, nil, fmt.Errorf("listing ActionSigners: %w", err)
	}
	var pol wbv1.WorkbenchPolicy
	if err := r.Get(ctx, client.ObjectKey{Name: wbv1.WorkbenchPolicyName}, &pol); err != nil {
		if !apierrors.IsNotFound(err) {
			return nil, nil, fmt.Errorf("reading WorkbenchPolicy %s: %w", wbv1.WorkbenchPolicyName, err)
		}
		return signers.Items, nil, nil
	}
	return signers.Items, &pol, nil
}

// AuthorizeRun builds the core's input for one run against its catalog.
func AuthorizeRun(cat *wbv1.ActionCatalog, run *wbv1.ActionRun, signers []wbv1.ActionSigner, pol *wbv1.WorkbenchPolicy) (actions.AuthorizeInput, error) {
	b, err := ActionSpecJSON(&cat.Spec)
	if err != nil {
		return actions.AuthorizeInput{}, err
	}
	in := actions.AuthorizeInput{
		Namespace: run.Namespace, CatalogName: cat.Name, SpecJSON: b, Signature: ActionSignature(cat.Signature),
		Signers: ActionSigners(signers), Policy: ActionPolicy(pol), ActionID: run.Spec.ActionID,
		ExpectedSpecDigest: string(run.Spec.ExpectedSpecDigest),
	}
	if run.Spec.Parameters != nil {
		in.Params = json.RawMessage(run.Spec.Parameters.Raw)
	}
	if run.Spec.TimeoutSeconds != nil {
		in.TimeoutSeconds = *run.Spec.TimeoutSeconds
	}
	in.Signing = ActionSigningRequest(run.Spec.Signing)
	return in, nil
}

// ActionSigningRequest is the core's form of a run's spec.signing (nil = none).
func ActionSigningRequest(s *wbv1.SigningRequest) *actions.SigningRequest {
	if s == nil {
		return nil
	}
	return &actions.SigningRequest{Domain: s.Domain, Signatures: s.Signatures}
}

// ActionObservation is the API form of a run's observation.
func ActionObservation(o actions.Observation) *wbv1.ActionObservation {
	return &wbv1.ActionObservation{SignalKind: o.SignalKind, SignalFamily: o.SignalFamily, SensitivityClass: o.SensitivityClass,
		IncidentalEffects: o.IncidentalEffects}
}

// ObservedOutcome completes a finished run's observation with what the node captured:
// touched files, network connections and artifacts add their effects.
func ObservedOutcome(obs *wbv1.ActionObservation, st *wbv1.ActionRunStatus) *wbv1.ActionObservation {
	if obs == nil {
		return nil
	}
	out := obs.DeepCopy()
	out.IncidentalEffects = actions.WithObserved(obs.IncidentalEffects, actions.Observed{
		WroteFiles: len(st.TouchedFiles) > 0, Connected: len(st.NetworkTranscript) > 0, ProducedFiles: len(st.ArtifactRefs) > 0})
	return out
}
