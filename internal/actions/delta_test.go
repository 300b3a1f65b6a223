package actions

import (
	"testing"

	"sensorium.dev/workbench/internal/actuation"
)

// TestCatalogDelta: "add to catalog" remembers exactly the C7 action as C1, leaves every
// other declaration and the base catalog untouched, changes the digest (so the base
// signature can never cover the proposal), and refuses what is not a declared C7 action.
func TestCatalogDelta(t *testing.T) {
	base := baseCatalog(t)
	var gated string
	for _, a := range base.Actions {
		if a.Class == ClassOperatorGated {
			gated = a.ID
		}
	}
	if gated == "" {
		t.Fatal("base catalog has no C7 action")
	}
	d, r := CatalogDelta(base, gated)
	if r != nil {
		t.Fatalf("delta refused: %v", r)
	}
	if got := d.Find(gated).Class; got != ClassReadOnlySpawn {
		t.Fatalf("remembered class = %s, want C1", got)
	}
	if base.Find(gated).Class != ClassOperatorGated {
		t.Fatal("delta modified the base catalog")
	}
	if len(d.Actions) != len(base.Actions) {
		t.Fatalf("delta has %d actions, base %d", len(d.Actions), len(base.Actions))
	}
	for i := range base.Actions {
		if base.Actions[i].ID != gated && base.Actions[i].Class != d.Actions[i].Class {
			t.Fatalf("action %s changed class", base.Actions[i].ID)
		}
	}
	bd, err := SpecDigest(base)
	if err != nil {
		t.Fatal(err)
	}
	dd, err := SpecDigest(d)
	if err != nil {
		t.Fatal(err)
	}
	if bd == dd {
		t.Fatal("delta has the base catalog's digest")
	}
	if rs := ValidateCatalog(d); len(rs) > 0 {
		t.Fatalf("delta invalid: %v", rs)
	}

	for _, tc := range []struct {
		id   string
		code actuation.Code
	}{
		{"no.such.action", actuation.CodeCatalogEntryMissing},
		{"node.echo", actuation.CodeConsentScopeInvalid},
	} {
		_, r := CatalogDelta(base, tc.id)
		if r == nil || r.Code != tc.code {
			t.Errorf("CatalogDelta(%s) = %v, want %s", tc.id, r, tc.code)
		}
	}
}
