package client

import (
	"context"
	"crypto/ed25519"
	"encoding/json"
	"fmt"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/retry"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actions"
	"sensorium.dev/workbench/internal/convert"
)

// GetCatalog reads an ActionCatalog of the client's namespace.
func (c *Client) GetCatalog(ctx context.Context, name string) (*wbv1.ActionCatalog, error) {
	var cat wbv1.ActionCatalog
	if err := c.Kube.Get(ctx, ctrlclient.ObjectKey{Namespace: c.Namespace, Name: name}, &cat); err != nil {
		return nil, Wrap("actioncatalog "+name, err)
	}
	return &cat, nil
}

// CatalogDigest is the digest a signature of the catalog's current spec covers.
func CatalogDigest(cat *wbv1.ActionCatalog) (string, error) {
	_, d, err := convert.ActionCatalog(cat)
	return d, err
}

// SignCatalog signs the catalog's spec as stored on the server (after defaulting) with priv
// under signer's name and writes the detached signature. The write carries the catalog's
// resourceVersion, so a spec changed since it was read is never signed by accident.
func (c *Client) SignCatalog(ctx context.Context, name, signer string, priv ed25519.PrivateKey, now metav1.Time) (*wbv1.ActionCatalog, error) {
	var out *wbv1.ActionCatalog
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cat, err := c.GetCatalog(ctx, name)
		if err != nil {
			return err
		}
		if rs := c.validate(cat); rs != nil {
			return rs
		}
		digest, err := CatalogDigest(cat)
		if err != nil {
			return err
		}
		value, err := actions.Sign(priv, digest)
		if err != nil {
			return Usage("signing %s: %v", name, err)
		}
		orig := cat.DeepCopy()
		cat.Signature = &wbv1.CatalogSignature{SignerRef: signer, SpecDigest: wbv1.Digest(digest), Value: value, SignedAt: &now}
		// A conflict (the object changed since it was read: a status write, or a spec edit)
		// is retried from a fresh read, so what is signed is always what is stored.
		if err := c.Kube.Patch(ctx, cat, ctrlclient.MergeFromWithOptions(orig, ctrlclient.MergeFromWithOptimisticLock{})); err != nil {
			return err
		}
		out = cat
		return nil
	})
	if err != nil {
		return nil, Wrap("actioncatalog "+name, err)
	}
	return out, nil
}

func (c *Client) validate(cat *wbv1.ActionCatalog) error {
	core, _, err := convert.ActionCatalog(cat)
	if err != nil {
		return err
	}
	if rs := actions.ValidateCatalog(core); len(rs) > 0 {
		return refused("actioncatalog "+cat.Name, string(rs[0].Code), rs[0].Error())
	}
	return nil
}

// CatalogVerdict is what `catalog verify` reports.
type CatalogVerdict struct {
	Catalog       string                `json:"catalog"`
	SpecDigest    string                `json:"specDigest"`
	Authorization string                `json:"authorization"`
	Code          string                `json:"code,omitempty"`
	Message       string                `json:"message"`
	Signer        string                `json:"signer,omitempty"`
	Actions       []actions.ActionState `json:"actions"`
}

// VerifyCatalog decides the catalog's signature here, with the same core as the manager and
// the node: it reads the ActionSigners and the WorkbenchPolicy (cluster-scoped reads).
func (c *Client) VerifyCatalog(ctx context.Context, name string) (*CatalogVerdict, error) {
	cat, err := c.GetCatalog(ctx, name)
	if err != nil {
		return nil, err
	}
	signers, pol, err := convert.ActionAuthority(ctx, c.Kube)
	if err != nil {
		return nil, Wrap("actionsigners", err)
	}
	core, digest, err := convert.ActionCatalog(cat)
	if err != nil {
		return nil, err
	}
	v, states := actions.CatalogStates(c.Namespace, core, digest, convert.ActionSignature(cat.Signature), convert.ActionSigners(signers), convert.ActionPolicy(pol))
	out := &CatalogVerdict{Catalog: name, SpecDigest: digest, Authorization: v.State, Code: string(v.Code), Message: v.Message, Actions: states}
	if v.Signer != nil {
		out.Signer = v.Signer.Name
	}
	return out, nil
}

// ActionRunRequest is one invocation.
type ActionRunRequest struct {
	Name, GenerateName string
	Catalog, Action    string
	Environment        string
	// Params is a JSON object.
	Params         json.RawMessage
	TimeoutSeconds int64
	// PinDigest pins the catalog spec the caller saw (allowlist-catalog-mismatch otherwise).
	PinDigest string
	// CorrelationID labels the run and its consent request (generated at admission when empty).
	CorrelationID string
}

// CreateActionRun creates an ActionRun; the admission webhook refuses it with its code
// when it could never run now.
func (c *Client) CreateActionRun(ctx context.Context, r ActionRunRequest) (*wbv1.ActionRun, error) {
	run := &wbv1.ActionRun{
		ObjectMeta: metav1.ObjectMeta{Name: r.Name, GenerateName: r.GenerateName, Namespace: c.Namespace},
		Spec: wbv1.ActionRunSpec{CatalogRef: wbv1.ObjectName(r.Catalog), ActionID: r.Action, EnvironmentRef: wbv1.ObjectName(r.Environment),
			ExpectedSpecDigest: wbv1.Digest(r.PinDigest)},
	}
	if r.CorrelationID != "" {
		run.Labels = map[string]string{wbv1.CorrelationLabel: r.CorrelationID}
	}
	if len(r.Params) > 0 {
		run.Spec.Parameters = &apiextensionsv1.JSON{Raw: r.Params}
	}
	if r.TimeoutSeconds > 0 {
		run.Spec.TimeoutSeconds = &r.TimeoutSeconds
	}
	if err := c.Kube.Create(ctx, run); err != nil {
		return nil, Wrap(fmt.Sprintf("actionrun %s%s", r.Name, r.GenerateName), err)
	}
	return run, nil
}

// WaitActionRun watches a run until until holds (nil: until it is final).
func (c *Client) WaitActionRun(ctx context.Context, name string, until func(*wbv1.ActionRun) bool) (*wbv1.ActionRun, error) {
	if until == nil {
		until = func(r *wbv1.ActionRun) bool { return wbv1.ActionRunIsFinal(r.Status.Conditions) }
	}
	run := &wbv1.ActionRun{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
	if err := waitFor(ctx, c, run, &wbv1.ActionRunList{}, func(r *wbv1.ActionRun) (bool, error) { return until(r), nil }); err != nil {
		return nil, err
	}
	return run, nil
}

// ActionRunOutcomeError is nil for a Succeeded run; *ExitError for a non-zero exit; *Error
// with the refusal code otherwise. The phase is derived from the run's conditions
// (wbv1.SummaryOf), never read from status.phase, which its writer may not have caught up
// on when the outcome condition arrived.
func ActionRunOutcomeError(r *wbv1.ActionRun) error {
	phase := wbv1.ActionRunPhase(wbv1.ActionRunSummary(r).Phase)
	switch phase {
	case wbv1.ActionRunSucceeded:
		return nil
	case wbv1.ActionRunFailed:
		if r.Status.Refusal == nil && r.Status.ExitCode != nil {
			return &ExitError{Command: "actionrun " + r.Name, Code: int(*r.Status.ExitCode)}
		}
	}
	if r.Status.Refusal != nil {
		return refused("actionrun "+r.Name, r.Status.Refusal.Code, r.Status.Refusal.Message)
	}
	return &Error{Class: ClassRuntime, Message: "run ended " + string(phase), Object: "actionrun " + r.Name}
}
