package actuation

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

func TestDurableGrantable(t *testing.T) {
	def := ConsentPolicy{}
	if r := def.DurableGrantable(CapabilityTerminalCommand, "ns", "p"); r != nil {
		t.Fatalf("default policy: terminal commands must be grantable, got %v", r)
	}
	if r := def.DurableGrantable(CapabilityActionRun, "ns", "cat"); r == nil || r.Code != CodeConsentCapabilityNotGrantable {
		t.Fatalf("action runs are never durably grantable, got %v", r)
	}
	if r := def.DurableGrantable("workbench.other", "ns", "p"); r == nil || r.Code != CodeConsentCapabilityNotGrantable {
		t.Fatalf("unknown capability must not be grantable, got %v", r)
	}
	pol := ConsentPolicy{Configured: true, Rules: []DurableGrantRule{
		{Capability: CapabilityTerminalCommand, Profiles: []string{"go-test"}},
		{Capability: CapabilityTerminalCommand, Namespaces: []string{"team-a"}, Profiles: []string{"make"}},
	}}
	for _, c := range []struct {
		ns, profile string
		ok          bool
	}{
		{"any", "go-test", true}, {"team-a", "make", true}, {"team-b", "make", false}, {"team-a", "bash-ish", false},
	} {
		r := pol.DurableGrantable(CapabilityTerminalCommand, c.ns, c.profile)
		if (r == nil) != c.ok || (r != nil && r.Code != CodeConsentCapabilityNotGrantable) {
			t.Errorf("%s/%s: got %v, want grantable=%v", c.ns, c.profile, r, c.ok)
		}
	}
	empty := ConsentPolicy{Configured: true}
	if r := empty.DurableGrantable(CapabilityTerminalCommand, "ns", "p"); r == nil {
		t.Fatal("a configured policy without rules must grant no remembered consent")
	}
	all := []ConsentScope{ScopeDeny, ScopeAllowOnce, ScopeRememberExactArgv, ScopeRememberArgvPrefix}
	if got := empty.GrantableOptions(all, CapabilityTerminalCommand, "ns", "p"); !slices.Equal(got, []ConsentScope{ScopeDeny, ScopeAllowOnce}) {
		t.Fatalf("options offered without the gate = %v, want deny and allow-once only", got)
	}
	if got := pol.GrantableOptions(all, CapabilityTerminalCommand, "x", "go-test"); !slices.Equal(got, all) {
		t.Fatalf("options offered with the gate = %v, want all", got)
	}
}

func TestDenyCooldown(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewDenyCooldownBounded(8, 3)
	argv := CooldownArgvDigest([]string{"/bin/rm", "-rf", "x"})
	c.Record("ns", "alice", argv, t0, time.Minute)
	if r := c.Check("ns", "alice", argv, t0.Add(30*time.Second)); r == nil || r.Code != CodeConsentCooldown {
		t.Fatalf("denied argv within the cooldown: got %v, want consent-cooldown", r)
	}
	if r := c.Check("ns", "bob", argv, t0.Add(30*time.Second)); r != nil {
		t.Fatalf("another identity is not cooled down: %v", r)
	}
	if r := c.Check("other", "alice", argv, t0.Add(30*time.Second)); r != nil {
		t.Fatalf("another namespace is not cooled down: %v", r)
	}
	if r := c.Check("ns", "alice", CooldownArgvDigest([]string{"/bin/rm", "-rf", "y"}), t0.Add(30*time.Second)); r != nil {
		t.Fatalf("another argv is not cooled down: %v", r)
	}
	if r := c.Check("ns", "alice", argv, t0.Add(time.Minute)); r != nil {
		t.Fatalf("after the cooldown the argv may ask again: %v", r)
	}
	if c.Len() != 0 {
		t.Fatalf("expired entries must be swept, %d left", c.Len())
	}

	// Per identity: at the bound, the identity asks nothing new (it cannot evict its own
	// cooldowns by collecting more denials).
	for i := range 3 {
		c.Record("ns", "mallory", CooldownArgvDigest([]string{"/bin/x", fmt.Sprint(i)}), t0, time.Hour)
	}
	if r := c.Check("ns", "mallory", CooldownArgvDigest([]string{"/bin/x", "new"}), t0.Add(time.Second)); r == nil || r.Code != CodeConsentCooldown {
		t.Fatalf("identity at its bound asking a new argv: got %v, want consent-cooldown", r)
	}
	c.Record("ns", "mallory", CooldownArgvDigest([]string{"/bin/x", "3"}), t0, time.Hour)
	if r := c.Check("ns", "mallory", CooldownArgvDigest([]string{"/bin/x", "0"}), t0.Add(time.Second)); r == nil {
		t.Fatal("an identity's cooldowns must still hold after it records past its bound")
	}

	// Globally bounded.
	for i := range 100 {
		c.Record("ns", fmt.Sprint("user", i), argv, t0, time.Hour)
	}
	if c.Len() > 8 {
		t.Fatalf("memory holds %d entries, bound is 8", c.Len())
	}

	// Off.
	off := NewDenyCooldown()
	off.Record("ns", "alice", argv, t0, ConsentPolicy{DenyCooldown: -1}.Cooldown())
	if off.Len() != 0 {
		t.Fatal("a disabled cooldown must record nothing")
	}
	if got := (ConsentPolicy{DenyCooldown: 48 * time.Hour}).Cooldown(); got != MaxDenyCooldown {
		t.Fatalf("cooldown is capped at %v, got %v", MaxDenyCooldown, got)
	}
}
