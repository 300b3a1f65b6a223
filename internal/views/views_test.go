package views

import (
	"testing"
	"time"

	"sensorium.dev/workbench/internal/actuation"
)

func TestDecide(t *testing.T) {
	now := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	bob := Identity{User: "bob", Groups: []string{"team-a", "system:authenticated"}}
	sa := Identity{User: "system:serviceaccount:ns:bee"}
	user := func(name string, exp time.Duration, revoked bool) Grant {
		return Grant{Name: name, ViewUID: "v1", Subject: Subject{Kind: KindUser, Name: "bob"}, ExpiresAt: now.Add(exp), Revoked: revoked}
	}
	for _, tc := range []struct {
		name   string
		grants []Grant
		id     Identity
		want   actuation.Code
		admit  string
	}{
		{"none", nil, bob, actuation.CodeViewGrantMissing, ""},
		{"active user", []Grant{user("g", time.Hour, false)}, bob, "", "g"},
		{"other user", []Grant{user("g", time.Hour, false)}, Identity{User: "bobby"}, actuation.CodeViewGrantMissing, ""},
		{"revoked", []Grant{user("g", time.Hour, true)}, bob, actuation.CodeViewGrantRevoked, ""},
		{"expired at the instant", []Grant{user("g", 0, false)}, bob, actuation.CodeViewGrantExpired, ""},
		{"revoked beats expired", []Grant{user("e", -time.Hour, false), user("r", time.Hour, true)}, bob, actuation.CodeViewGrantRevoked, ""},
		{"a new grant after a revoked one", []Grant{user("r", time.Hour, true), user("n", time.Hour, false)}, bob, "", "n"},
		{"another view's grant", []Grant{{Name: "g", ViewUID: "v0", Subject: Subject{Kind: KindUser, Name: "bob"}, ExpiresAt: now.Add(time.Hour)}}, bob, actuation.CodeViewGrantMissing, ""},
		{"group", []Grant{{Name: "g", ViewUID: "v1", Subject: Subject{Kind: KindGroup, Name: "team-a"}, ExpiresAt: now.Add(time.Hour)}}, bob, "", "g"},
		{"service account", []Grant{{Name: "g", ViewUID: "v1", Subject: Subject{Kind: KindServiceAccount, Namespace: "ns", Name: "bee"}, ExpiresAt: now.Add(time.Hour)}}, sa, "", "g"},
		{"service account in another namespace", []Grant{{Name: "g", ViewUID: "v1", Subject: Subject{Kind: KindServiceAccount, Namespace: "other", Name: "bee"}, ExpiresAt: now.Add(time.Hour)}}, sa, actuation.CodeViewGrantMissing, ""},
		{"user subject never matches a service account by name", []Grant{{Name: "g", ViewUID: "v1", Subject: Subject{Kind: KindUser, Name: "bee"}, ExpiresAt: now.Add(time.Hour)}}, sa, actuation.CodeViewGrantMissing, ""},
	} {
		g, code := Decide(tc.grants, "v1", tc.id, now)
		if code != tc.want || g.Name != tc.admit {
			t.Errorf("%s: Decide = (%q, %q), want (%q, %q)", tc.name, g.Name, code, tc.admit, tc.want)
		}
	}
	if _, code := Decide([]Grant{user("g", time.Hour, false)}, "", bob, now); code != actuation.CodeViewGrantMissing {
		t.Errorf("an empty view UID admitted: %q", code)
	}
}

func TestCheckBinding(t *testing.T) {
	bound := Binding{EnvironmentUID: "e1", SourceGeneration: 3, Context: actuation.ContextTest}
	for _, tc := range []struct {
		name    string
		now     Binding
		ceiling actuation.ContextClass
		want    actuation.Code
	}{
		{"same", bound, actuation.ContextTest, ""},
		{"replaced environment", Binding{"e2", 3, actuation.ContextTest}, actuation.ContextTest, actuation.CodeViewContextSuperseded},
		{"new generation", Binding{"e1", 4, actuation.ContextTest}, actuation.ContextTest, actuation.CodeViewContextSuperseded},
		{"raised context", Binding{"e1", 3, actuation.ContextProduction}, actuation.ContextCritical, actuation.CodeViewContextSuperseded},
		{"environment gone", Binding{}, actuation.ContextTest, actuation.CodeViewContextSuperseded},
		{"above the ceiling", bound, actuation.ContextResearch, actuation.CodeViewClassificationExceeded},
	} {
		if got := CheckBinding(bound, tc.now, tc.ceiling); got != tc.want {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	if got := CheckCeiling("", actuation.ContextCritical); got != actuation.CodeViewContextMissing {
		t.Errorf("missing context: %q", got)
	}
	if got := CurrentContext(actuation.ContextTest, actuation.ContextProduction); got != actuation.ContextProduction {
		t.Errorf("CurrentContext = %q", got)
	}
}

func TestValidate(t *testing.T) {
	now := time.Now()
	if ValidateLifetime(now.Add(MaxGrantLifetime+time.Second), now) == nil || ValidateLifetime(now, now) == nil || ValidateLifetime(now.Add(time.Hour), now) != nil {
		t.Error("lifetime bounds")
	}
	for _, s := range []Subject{{Kind: "Robot", Name: "x"}, {Kind: KindUser}, {Kind: KindServiceAccount, Name: "x"}, {Kind: KindUser, Name: "x", Namespace: "ns"}} {
		if r := ValidateSubject(s); r == nil || r.Code != actuation.CodeViewSubjectInvalid {
			t.Errorf("subject %+v admitted", s)
		}
	}
}

func TestBoundLines(t *testing.T) {
	lines, cut := BoundLines([]string{"abc", "déf", "ghi"}, 7)
	if !cut || len(lines) != 2 || lines[0] != "abc" || lines[1] != "d" {
		t.Fatalf("BoundLines = %q %v", lines, cut)
	}
	if lines, cut := BoundLines([]string{"a", "b"}, 4); cut || len(lines) != 2 {
		t.Fatalf("BoundLines fits = %q %v", lines, cut)
	}
}
