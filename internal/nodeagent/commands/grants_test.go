package commands

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
	"sensorium.dev/workbench/internal/actuation"
)

// TestAdmitLiveHoldsGrantsAtTheNode: an entry the projection still carries admits only while
// its own expiry has not passed and the grant behind it holds; otherwise the command is
// refused with consent-expired or consent-revoked, unless another live grant admits it.
func TestAdmitLiveHoldsGrantsAtTheNode(t *testing.T) {
	now := time.Now()
	core := actuation.Profile{Executable: "/usr/bin/make", AllowedRoots: []string{"repo"}, CwdPolicy: actuation.CwdRootOnly,
		Egress: "Deny", Credentials: "Denied", MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 20, PTY: "Disabled"}
	in := actuation.CommandIntent{ProfileRef: "p", Argv: []string{"/usr/bin/make", "build"}, Cwd: actuation.CwdAddress{Root: "repo"},
		TimeoutSeconds: 10, OutputBytes: 1024}
	subject := actuation.Subject{Ref: "ns/c", UID: "c-uid", Environment: "e", EnvironmentUID: "e-uid"}
	entry := func(name string, exp time.Time, envUID string) actuation.ConsentEntry {
		return actuation.ConsentEntry{Scope: actuation.ScopeRememberExactArgv, GrantRef: name, Argv: in.Argv, Cwd: in.Cwd,
			Environment: "e", EnvironmentUID: envUID, ExpiresAt: exp}
	}
	grants := map[string]*wbv1.ConsentGrant{
		"live":    {ObjectMeta: metav1.ObjectMeta{Name: "live"}, Spec: wbv1.ConsentGrantSpec{Scope: wbv1.ConsentRememberExactArgv}},
		"revoked": {ObjectMeta: metav1.ObjectMeta{Name: "revoked"}, Spec: wbv1.ConsentGrantSpec{Scope: wbv1.ConsentRememberExactArgv, Revoked: ptrTo(true)}},
		"lapsed": {ObjectMeta: metav1.ObjectMeta{Name: "lapsed"}, Spec: wbv1.ConsentGrantSpec{Scope: wbv1.ConsentRememberExactArgv,
			ExpiresAt: &metav1.Time{Time: now.Add(-time.Second)}}},
	}
	live := func(e actuation.ConsentEntry) *actuation.Refusal {
		if r := actuation.ConsentEntryLapsed(e, now); r != nil {
			return r
		}
		g := grants[e.GrantRef]
		if g == nil {
			return actuation.Refuse(actuation.CodeConsentRevoked, "grantRef", "gone")
		}
		return grantHolds(g, now)
	}
	for _, c := range []struct {
		name     string
		entries  []actuation.ConsentEntry
		admitted bool
		code     actuation.Code
	}{
		{"live grant", []actuation.ConsentEntry{entry("live", now.Add(time.Hour), "e-uid")}, true, ""},
		{"projected expiry passed", []actuation.ConsentEntry{entry("live", now.Add(-time.Second), "e-uid")}, false, actuation.CodeConsentExpired},
		{"no projected expiry", []actuation.ConsentEntry{entry("live", time.Time{}, "e-uid")}, false, actuation.CodeConsentExpired},
		{"revoked grant still projected", []actuation.ConsentEntry{entry("revoked", now.Add(time.Hour), "e-uid")}, false, actuation.CodeConsentRevoked},
		{"grant past its own expiry", []actuation.ConsentEntry{entry("lapsed", now.Add(time.Hour), "e-uid")}, false, actuation.CodeConsentExpired},
		{"deleted grant", []actuation.ConsentEntry{entry("gone", now.Add(time.Hour), "e-uid")}, false, actuation.CodeConsentRevoked},
		{"revoked then live", []actuation.ConsentEntry{entry("a-revoked", now.Add(time.Hour), "e-uid"), entry("live", now.Add(time.Hour), "e-uid")}, true, ""},
		{"reviewed on another environment object", []actuation.ConsentEntry{entry("live", now.Add(time.Hour), "old-uid")}, false, actuation.CodeConsentRequired},
		{"reviewed before UIDs were recorded", []actuation.ConsentEntry{entry("live", now.Add(time.Hour), "")}, false, actuation.CodeConsentRequired},
	} {
		t.Run(c.name, func(t *testing.T) {
			grants["a-revoked"] = grants["revoked"]
			adm, lapsed := admitLive(core, c.entries, in, subject, live)
			if adm.Admitted != c.admitted {
				t.Fatalf("admitted = %v (%+v, lapsed %v), want %v", adm.Admitted, adm, lapsed, c.admitted)
			}
			if c.admitted {
				return
			}
			code := actuation.Code("")
			switch {
			case lapsed != nil:
				code = lapsed.Code
			case adm.Refusal != nil:
				code = adm.Refusal.Code
			}
			if code != c.code {
				t.Fatalf("code = %q (%+v, lapsed %v), want %q", code, adm, lapsed, c.code)
			}
		})
	}
}

func ptrTo[T any](v T) *T { return &v }
