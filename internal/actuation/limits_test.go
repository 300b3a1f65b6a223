package actuation

import "testing"

// TestLimitsTable: every node ceiling admits exactly its maximum and refuses one above it
// with its code, through the core function admission uses for that field.
func TestLimitsTable(t *testing.T) {
	p := goTestProfile()
	check := map[string]func(v int64) []*Refusal{
		"command-timeout":  func(v int64) []*Refusal { return ValidateCommandCeilings(v, 1) },
		"command-output":   func(v int64) []*Refusal { return ValidateCommandCeilings(1, v) },
		"profile-timeout":  func(v int64) []*Refusal { q := p; q.MaxTimeoutSeconds = v; return ValidateProfile(q) },
		"profile-output":   func(v int64) []*Refusal { q := p; q.MaxOutputBytes = v; return ValidateProfile(q) },
		"session-duration": func(v int64) []*Refusal { return ValidateSessionCeilings(v, 1) },
		"session-idle":     func(v int64) []*Refusal { return ValidateSessionCeilings(1, v) },
	}
	for _, l := range Limits() {
		f := check[l.Name]
		if f == nil {
			t.Errorf("%s: no check in this table", l.Name)
			continue
		}
		if rs := f(l.Max); len(rs) != 0 {
			t.Errorf("%s: the maximum %d is refused: %v", l.Name, l.Max, rs)
		}
		if rs := f(l.Max + 1); len(rs) != 1 || rs[0].Code != l.Code {
			t.Errorf("%s: %d: got %v, want one %s", l.Name, l.Max+1, rs, l.Code)
		}
	}
	if len(check) != len(Limits()) {
		t.Errorf("table has %d checks for %d limits", len(check), len(Limits()))
	}
}
