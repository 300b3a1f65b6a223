package actions

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
)

const vectorsDir = "../../test/vectors/actions"

type validationFile struct {
	Schema      string                     `json:"schema"`
	Kind        string                     `json:"kind"`
	Description string                     `json:"description"`
	Bases       map[string]json.RawMessage `json:"bases"`
	Vectors     []struct {
		Name  string `json:"name"`
		Input struct {
			Base  string          `json:"base"`
			Patch json.RawMessage `json:"patch"`
			Extra []struct {
				Base  string          `json:"base"`
				Patch json.RawMessage `json:"patch"`
			} `json:"extra"`
		} `json:"input"`
		Expect struct {
			OK    bool             `json:"ok"`
			Codes []actuation.Code `json:"codes"`
		} `json:"expect"`
	} `json:"vectors"`
}

func loadJSON(t *testing.T, name string, v any) {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(vectorsDir, name))
	if err != nil {
		t.Fatalf("reading vectors: %v", err)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		t.Fatalf("decoding %s: %v", name, err)
	}
}

// mergePatch applies an RFC 7386 JSON merge patch.
func mergePatch(target any, patch any) any {
	p, ok := patch.(map[string]any)
	if !ok {
		return patch
	}
	t, ok := target.(map[string]any)
	if !ok {
		t = map[string]any{}
	}
	for k, v := range p {
		if v == nil {
			delete(t, k)
			continue
		}
		t[k] = mergePatch(t[k], v)
	}
	return t
}

func buildAction(t *testing.T, bases map[string]json.RawMessage, base string, patch json.RawMessage) Action {
	t.Helper()
	raw, ok := bases[base]
	if !ok {
		t.Fatalf("unknown base %q", base)
	}
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(patch) > 0 {
		var p any
		if err := json.Unmarshal(patch, &p); err != nil {
			t.Fatal(err)
		}
		doc = mergePatch(doc, p)
	}
	b, _ := json.Marshal(doc)
	var a Action
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&a); err != nil {
		t.Fatalf("decoding action: %v", err)
	}
	return a
}

// TestCatalogValidationVectors runs the golden catalog-validation vectors: every structural
// error of seed 002 (and the envelope rules of this implementation) with its code.
func TestCatalogValidationVectors(t *testing.T) {
	var f validationFile
	loadJSON(t, "catalog-validation.json", &f)
	if f.Schema != "workbench-vectors.v1" || f.Kind != "catalog-validation" {
		t.Fatalf("schema %q kind %q", f.Schema, f.Kind)
	}
	if len(f.Vectors) < 60 {
		t.Fatalf("%d vectors, want at least 60", len(f.Vectors))
	}
	covered := map[actuation.Code]bool{}
	names := map[string]bool{}
	for _, v := range f.Vectors {
		if names[v.Name] {
			t.Fatalf("vector name %q repeats", v.Name)
		}
		names[v.Name] = true
		t.Run(v.Name, func(t *testing.T) {
			cat := Catalog{Actions: []Action{buildAction(t, f.Bases, v.Input.Base, v.Input.Patch)}}
			for _, x := range v.Input.Extra {
				cat.Actions = append(cat.Actions, buildAction(t, f.Bases, x.Base, x.Patch))
			}
			rs := ValidateCatalog(cat)
			var got []actuation.Code
			for _, r := range rs {
				got = append(got, r.Code)
			}
			slices.Sort(got)
			got = slices.Compact(got)
			if v.Expect.OK {
				if len(rs) > 0 {
					t.Fatalf("want ok, got %v", rs)
				}
				return
			}
			for _, c := range v.Expect.Codes {
				if !actuation.IsKnownCode(c) {
					t.Fatalf("vector names unknown code %q", c)
				}
				covered[c] = true
			}
			if !slices.Equal(got, v.Expect.Codes) {
				t.Fatalf("want codes %v, got %v (%v)", v.Expect.Codes, got, rs)
			}
		})
	}
	// Every structural code of the seed's list that catalog validation can raise is covered.
	for _, c := range []actuation.Code{
		actuation.CodeActionIDMissing, actuation.CodeActionIDFormatInvalid, actuation.CodeActionIDDuplicate,
		actuation.CodeActionClassUnknown, actuation.CodeParametersSchemaInvalid, actuation.CodeResultPointerFieldInvalid,
		actuation.CodeResultSchemaInvalid, actuation.CodeSensitivityOverrideForbidden, actuation.CodeSensitivityKeysForbidden,
		actuation.CodeScriptExecutableMissing, actuation.CodeScriptHashMismatch, actuation.CodeWorkingDirectoryForbidden,
	} {
		if !covered[c] {
			t.Errorf("no vector covers structural code %s", c)
		}
	}
}
