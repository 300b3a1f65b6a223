package actions

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"sensorium.dev/workbench/internal/actuation"
)

// MaxParamsBytes caps the canonical parameters of one run.
const MaxParamsBytes = 64 << 10

// schemaURL is the in-memory location a parameters schema compiles under.
const schemaURL = "mem://action/parameters.schema.json"

// refuseLoader refuses every external schema: a catalog's schema is self-contained.
type refuseLoader struct{}

func (refuseLoader) Load(url string) (any, error) {
	return nil, fmt.Errorf("external schema %q is not loaded: parametersSchema must be self-contained", url)
}

// compileSchema compiles a parameters schema (draft 2020-12 unless $schema says
// otherwise), validating it against its metaschema; no external reference is loaded.
func compileSchema(raw json.RawMessage) (*jsonschema.Schema, *actuation.Refusal) {
	if len(raw) > MaxSchemaBytes {
		return nil, actuation.Refuse(actuation.CodeParametersSchemaInvalid, "parametersSchema", "must not exceed %d bytes", MaxSchemaBytes)
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, actuation.Refuse(actuation.CodeParametersSchemaInvalid, "parametersSchema", "must be JSON: %v", err)
	}
	obj, ok := doc.(map[string]any)
	if !ok {
		return nil, actuation.Refuse(actuation.CodeParametersSchemaInvalid, "parametersSchema", "must be a JSON Schema object")
	}
	if t, has := obj["type"]; has && t != "object" {
		return nil, actuation.Refuse(actuation.CodeParametersSchemaInvalid, "parametersSchema.type", "must be object: parameters are one JSON object")
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	c.UseLoader(refuseLoader{})
	if err := c.AddResource(schemaURL, doc); err != nil {
		return nil, actuation.Refuse(actuation.CodeParametersSchemaInvalid, "parametersSchema", "must be a well-formed JSON Schema: %v", oneLine(err))
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, actuation.Refuse(actuation.CodeParametersSchemaInvalid, "parametersSchema", "must be a well-formed JSON Schema: %v", oneLine(err))
	}
	return s, nil
}

// reservedParamKeys are request-local policy fields the seed forbids in a request.
var reservedParamKeys = []string{"host_policy", "hostPolicy", "allowlist_entry", "allowlistEntry"}

// ValidateParams checks a run's parameters against its action: one JSON object (absent =
// {}), no request-local host policy (host-policy-request-forbidden), at most
// MaxParamsBytes canonical, and valid under parametersSchema (parameters-invalid). It
// returns the canonical JSON of the parameters.
func ValidateParams(a *Action, params json.RawMessage) ([]byte, *actuation.Refusal) {
	if len(bytes.TrimSpace(params)) == 0 {
		params = json.RawMessage("{}")
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal(params, &obj); err != nil || obj == nil {
		return nil, actuation.Refuse(actuation.CodeParametersInvalid, "spec.parameters", "must be one JSON object")
	}
	for _, k := range reservedParamKeys {
		if _, has := obj[k]; has {
			return nil, actuation.Refuse(actuation.CodeHostPolicyRequestForbidden, "spec.parameters."+k, "must not carry request-local host policy: policy comes from WorkbenchPolicy only")
		}
	}
	canon, err := actuation.CanonicalJSON(json.RawMessage(params))
	if err != nil {
		return nil, actuation.Refuse(actuation.CodeParametersInvalid, "spec.parameters", "must be canonicalizable JSON: %v", err)
	}
	if len(canon) > MaxParamsBytes {
		return nil, actuation.Refuse(actuation.CodeParametersInvalid, "spec.parameters", "must not exceed %d bytes canonical (got %d)", MaxParamsBytes, len(canon))
	}
	if len(a.ParametersSchema) == 0 {
		if len(obj) > 0 {
			return nil, actuation.Refuse(actuation.CodeParametersInvalid, "spec.parameters", "must be empty: action %q declares no parametersSchema", clip(a.ID))
		}
		return canon, nil
	}
	s, r := compileSchema(a.ParametersSchema)
	if r != nil {
		return nil, r
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(canon))
	if err != nil {
		return nil, actuation.Refuse(actuation.CodeParametersInvalid, "spec.parameters", "must be JSON: %v", err)
	}
	if err := s.Validate(inst); err != nil {
		var ve *jsonschema.ValidationError
		msg := oneLine(err)
		if errors.As(err, &ve) {
			msg = oneLine(ve)
		}
		return nil, actuation.Refuse(actuation.CodeParametersInvalid, "spec.parameters", "must satisfy the action's parametersSchema: %s", msg)
	}
	return canon, nil
}

func oneLine(err error) string {
	s := strings.Join(strings.Fields(err.Error()), " ")
	if len(s) > 512 {
		s = s[:512] + "…"
	}
	return s
}
