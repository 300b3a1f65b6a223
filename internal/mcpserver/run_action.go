package mcpserver

import (
	"context"
	"encoding/json"
	"fmt"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	wbclient "sensorium.dev/workbench/pkg/client"
)

// RunActionInput runs one action of an ActionCatalog (an ActionRun).
type RunActionInput struct {
	Catalog        string         `json:"catalog" jsonschema:"ActionCatalog name in the namespace"`
	Action         string         `json:"action" jsonschema:"the action's id in the catalog"`
	Environment    string         `json:"environment" jsonschema:"Environment whose workspace and node the run uses"`
	Params         map[string]any `json:"params,omitempty" jsonschema:"the action's parameters (a JSON object)"`
	TimeoutSeconds int64          `json:"timeoutSeconds,omitempty" jsonschema:"the run's timeout (the action's default when 0)"`
	PinDigest      string         `json:"pinDigest,omitempty" jsonschema:"the catalog spec digest the caller saw (refused with allowlist-catalog-mismatch when it changed)"`
	CorrelationID  string         `json:"correlationID,omitempty" jsonschema:"correlation id threading this run through its consent request and artifacts (a label value: at most 63 characters of [A-Za-z0-9._-]); generated when empty"`
}

// ActionRunResult is a run's outcome, or AwaitingConsent.
type ActionRunResult struct {
	Name           string `json:"name"`
	Phase          string `json:"phase"`
	ExitCode       *int32 `json:"exitCode,omitempty"`
	ConsentRequest string `json:"consentRequest,omitempty"`
	CorrelationID  string `json:"correlationID,omitempty"`
}

// runAction creates the ActionRun and follows it (bounded by MaxRunWait) until it is
// final or waits for an operator's consent.
func runAction(ctx context.Context, cl *wbclient.Client, in RunActionInput) (ActionRunResult, error) {
	req := wbclient.ActionRunRequest{GenerateName: "run-", Catalog: in.Catalog, Action: in.Action, Environment: in.Environment,
		TimeoutSeconds: in.TimeoutSeconds, PinDigest: in.PinDigest, CorrelationID: in.CorrelationID}
	if len(in.Params) > 0 {
		raw, err := json.Marshal(in.Params)
		if err != nil {
			return ActionRunResult{}, fmt.Errorf("encoding params: %w", err)
		}
		req.Params = raw
	}
	run, err := cl.CreateActionRun(ctx, req)
	if err != nil {
		return ActionRunResult{}, err
	}
	ctx, cancel := context.WithTimeout(ctx, MaxRunWait)
	defer cancel()
	run, err = cl.WaitActionRun(ctx, run.Name, func(r *wbv1.ActionRun) bool {
		return wbv1.ActionRunIsFinal(r.Status.Conditions) || wbv1.ActionRunPhaseFor(r.Status.Conditions) == wbv1.ActionRunAwaitingConsent
	})
	if err != nil {
		return ActionRunResult{}, err
	}
	res := ActionRunResult{Name: run.Name, Phase: wbv1.ActionRunSummary(run).Phase, ExitCode: run.Status.ExitCode,
		ConsentRequest: run.Status.ConsentRequestRef, CorrelationID: run.Labels[wbv1.CorrelationLabel]}
	if !wbv1.ActionRunIsFinal(run.Status.Conditions) {
		return res, nil
	}
	return res, wbclient.ActionRunOutcomeError(run)
}
