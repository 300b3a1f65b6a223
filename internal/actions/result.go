package actions

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"

	"sensorium.dev/workbench/internal/actuation"
)

// MaxPointerValueBytes caps one propagated pointer value (canonical JSON).
const MaxPointerValueBytes = 1024

// ResultPointers reads a json result and returns the declared pointer fields as key →
// canonical JSON of the value. stdout must be one JSON object (result-schema-invalid);
// when it has a "pointers" object the fields are read there, else at the top level. An
// exact field must be present and a prefix "p.*" must match at least one key
// (result-pointer-missing). Only declared keys are propagated. A text contract returns nil.
func ResultPointers(a *Action, stdout []byte) (map[string]string, *actuation.Refusal) {
	if a.ResultContract.StdoutFormat != "json" {
		return nil, nil
	}
	var obj map[string]json.RawMessage
	dec := json.NewDecoder(bytes.NewReader(stdout))
	if err := dec.Decode(&obj); err != nil || obj == nil || dec.More() {
		return nil, actuation.Refuse(actuation.CodeResultSchemaInvalid, "stdout", "must be exactly one JSON object (stdoutFormat json)")
	}
	if p, has := obj["pointers"]; has {
		var inner map[string]json.RawMessage
		if err := json.Unmarshal(p, &inner); err == nil && inner != nil {
			obj = inner
		}
	}
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	out := map[string]string{}
	put := func(k string) *actuation.Refusal {
		c, err := actuation.CanonicalJSON(obj[k])
		if err != nil {
			return actuation.Refuse(actuation.CodeResultSchemaInvalid, "stdout."+k, "must be JSON")
		}
		if len(c) > MaxPointerValueBytes {
			return actuation.Refuse(actuation.CodeResultSchemaInvalid, "stdout."+k, "must be at most %d bytes as canonical JSON", MaxPointerValueBytes)
		}
		out[k] = string(c)
		return nil
	}
	for _, f := range a.ResultContract.ResultPointerFields {
		if prefix, ok := strings.CutSuffix(f, ".*"); ok {
			n := 0
			for _, k := range keys {
				if strings.HasPrefix(k, prefix+".") {
					if r := put(k); r != nil {
						return nil, r
					}
					n++
				}
			}
			if n == 0 {
				return nil, actuation.Refuse(actuation.CodeResultPointerMissing, "stdout", "must contain at least one field under %q", f)
			}
			continue
		}
		if _, has := obj[f]; !has {
			return nil, actuation.Refuse(actuation.CodeResultPointerMissing, "stdout", "must contain the declared field %q", f)
		}
		if r := put(f); r != nil {
			return nil, r
		}
	}
	if len(out) > 64 {
		return nil, actuation.Refuse(actuation.CodeResultSchemaInvalid, "stdout", "must not propagate more than 64 pointer fields")
	}
	return out, nil
}
