package actions

import (
	"slices"

	"sensorium.dev/workbench/internal/actuation"
)

// CatalogDelta is the catalog an operator's "add to catalog" consent proposes for the
// C7 (operator-gated) action id of base: base with that action remembered, that is
// declared C1 (read-only spawn: the envelope a C7 run already runs under) so that a run
// of it no longer waits for a prompt. Everything else of the declaration (executable,
// argv template, parameter schema, caps, result contract, sensitivity) and every other
// action stay as they are. The proposal carries no authority: it is a new catalog, and it
// runs only once a signer in scope signs it.
//
// It refuses an action that is not declared in base (catalog-entry-missing), one that is
// not C7 (consent-scope-invalid: no other class is ever prompted for), and a result the
// catalog validator refuses (its first refusal).
func CatalogDelta(base Catalog, actionID string) (Catalog, *actuation.Refusal) {
	out := Catalog{Actions: slices.Clone(base.Actions)}
	a := out.Find(actionID)
	switch {
	case a == nil:
		return Catalog{}, actuation.Refuse(actuation.CodeCatalogEntryMissing, "spec.actionId", "action %q is not declared in the catalog", clip(actionID))
	case a.Class != ClassOperatorGated:
		return Catalog{}, actuation.Refuse(actuation.CodeConsentScopeInvalid, "spec.actionId", "only a %s (%s) action can be added to a catalog by consent; %q is %s",
			ClassOperatorGated, SeedName(ClassOperatorGated), clip(actionID), a.Class)
	}
	a.Class = ClassReadOnlySpawn
	if rs := ValidateCatalog(out); len(rs) > 0 {
		return Catalog{}, rs[0]
	}
	return out, nil
}
