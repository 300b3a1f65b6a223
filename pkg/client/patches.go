package client

import (
	"context"
	"crypto/sha256"
	"encoding/hex"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	ctrlclient "sigs.k8s.io/controller-runtime/pkg/client"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// PatchRequest proposes a unified diff to one root of an environment (the CLI's `patch
// propose` and the MCP propose_patch tool's input schema).
type PatchRequest struct {
	Environment string `json:"environment" jsonschema:"Environment the patch applies to"`
	Root        string `json:"root" jsonschema:"root the diff's paths are relative to"`
	Diff        string `json:"diff" jsonschema:"unified diff (git diff format)"`
	AllowCreate bool   `json:"allowCreate,omitempty" jsonschema:"allow the patch to create files"`
	Name        string `json:"name,omitempty" jsonschema:"FilePatch name (default: generated)"`
}

// ProposePatch creates a FilePatch awaiting approval; its digest is sha256 of the diff.
func (c *Client) ProposePatch(ctx context.Context, r PatchRequest) (*wbv1.FilePatch, error) {
	if r.Environment == "" || r.Root == "" || r.Diff == "" {
		return nil, Usage("a patch needs an environment, a root and a diff")
	}
	sum := sha256.Sum256([]byte(r.Diff))
	p := &wbv1.FilePatch{ObjectMeta: metav1.ObjectMeta{Name: r.Name, Namespace: c.Namespace},
		Spec: wbv1.FilePatchSpec{EnvironmentRef: wbv1.ObjectName(r.Environment), Root: wbv1.RootName(r.Root),
			Format: wbv1.PatchFormatUnified, Patch: &r.Diff, Digest: wbv1.Digest("sha256:" + hex.EncodeToString(sum[:]))}}
	if r.Name == "" {
		p.GenerateName = "patch-"
	}
	if r.AllowCreate {
		p.Spec.Policy.AllowCreate = ptr(true)
	}
	if err := c.Kube.Create(ctx, p); err != nil {
		return nil, Wrap("filepatch "+r.Name, err)
	}
	return p, nil
}

// DecidePatch sets spec.approval to Approved or Rejected (the webhook checks the caller may
// approve filepatches) and, with wait, returns once the node has recorded the outcome.
func (c *Client) DecidePatch(ctx context.Context, name string, approve, wait bool) (*wbv1.FilePatch, error) {
	state := "Rejected"
	if approve {
		state = "Approved"
	}
	p := &wbv1.FilePatch{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace}}
	patch := ctrlclient.RawPatch(types.MergePatchType, []byte(`{"spec":{"approval":"`+state+`"}}`))
	if err := c.Kube.Patch(ctx, p, patch); err != nil {
		return nil, Wrap("filepatch "+name, err)
	}
	if !wait {
		return p, nil
	}
	err := waitFor(ctx, c, p, &wbv1.FilePatchList{}, func(p *wbv1.FilePatch) (bool, error) {
		s, _ := wbv1.SummaryOf(p)
		return s.Final || p.Status.Refusal != nil, nil
	})
	if err != nil {
		return nil, err
	}
	if p.Status.Refusal != nil {
		return p, refused("filepatch "+name, p.Status.Refusal.Code, p.Status.Refusal.Message)
	}
	return p, nil
}
