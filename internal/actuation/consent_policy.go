package actuation

import (
	"slices"
	"sync"
	"time"
)

// Durable consent grantability and the deny cooldown (seed 000 "operator consent
// prompting": durable grants "require ... a host grantability policy/capability gate for
// the requested consent scope"; deny "fail[s] closed and optionally suppress[es] repeated
// identical prompts for a bounded cooldown"). One place for both rules: the manager asks
// DurableGrantable before it offers remembered scopes and before a grant is admitted or
// kept active, and DenyCooldown before it asks an operator again.

// DurableGrantRule names where remembered (durable) grants may be given: a capability, and
// optionally the namespaces and profiles it is limited to (empty = any).
type DurableGrantRule struct {
	Capability string
	Namespaces []string
	Profiles   []string
}

// ConsentPolicy is the host's consent policy. With Configured false (no WorkbenchPolicy,
// or one without a consent block) the default holds: terminal commands may be remembered
// under any profile, ActionRuns never (their consent is allow-once or add-to-catalog).
type ConsentPolicy struct {
	Configured bool
	Rules      []DurableGrantRule
	// DenyCooldown is how long a denied argv may not ask again for the same identity; zero
	// takes DefaultDenyCooldown, a negative value turns the cooldown off.
	DenyCooldown time.Duration
}

// The consent policy's bounds.
const (
	// DefaultDenyCooldown is the cooldown when the policy names none.
	DefaultDenyCooldown = 5 * time.Minute
	// MaxDenyCooldown bounds a configured cooldown.
	MaxDenyCooldown = 24 * time.Hour
	// MaxDurableGrantRules bounds the rules of a policy.
	MaxDurableGrantRules = 64
)

// Capabilities consent concerns (the values of the API's ConsentCapability).
const (
	CapabilityTerminalCommand = "workbench.terminal.command"
	CapabilityActionRun       = "workbench.action.run"
)

// DurableScope reports whether a scope outlives the one request it answers.
func DurableScope(s ConsentScope) bool {
	return s == ScopeRememberExactArgv || s == ScopeRememberArgvPrefix
}

// DurableGrantable refuses with consent-capability-not-grantable when the policy lets no
// remembered grant be given for capability under profile in namespace. ActionRuns are never
// durably grantable: a remembered action is a catalog entry, signed.
func (p ConsentPolicy) DurableGrantable(capability, namespace, profile string) *Refusal {
	if capability == CapabilityActionRun {
		return Refuse(CodeConsentCapabilityNotGrantable, "spec.scope",
			"capability %s never receives remembered grants: remember an action by adding it to a signed catalog", capability)
	}
	if !p.Configured {
		if capability == CapabilityTerminalCommand {
			return nil
		}
		return Refuse(CodeConsentCapabilityNotGrantable, "spec.scope", "capability %q is not grantable for remembered consent", capability)
	}
	for _, r := range p.Rules {
		if r.Capability == capability && (len(r.Namespaces) == 0 || slices.Contains(r.Namespaces, namespace)) &&
			(len(r.Profiles) == 0 || slices.Contains(r.Profiles, profile)) {
			return nil
		}
	}
	return Refuse(CodeConsentCapabilityNotGrantable, "spec.scope",
		"the WorkbenchPolicy's consent.durableGrants names no rule for capability %s with profile %s in namespace %s: only deny and allow-once may be given", capability, profile, namespace)
}

// GrantableOptions filters the scopes offered to an operator: remembered scopes only where
// DurableGrantable admits them (seed 000: the option "must be hidden when the gate is absent").
func (p ConsentPolicy) GrantableOptions(options []ConsentScope, capability, namespace, profile string) []ConsentScope {
	if p.DurableGrantable(capability, namespace, profile) == nil {
		return slices.Clone(options)
	}
	return slices.DeleteFunc(slices.Clone(options), DurableScope)
}

// Cooldown is the effective deny cooldown.
func (p ConsentPolicy) Cooldown() time.Duration {
	switch {
	case p.DenyCooldown < 0:
		return 0
	case p.DenyCooldown == 0:
		return DefaultDenyCooldown
	case p.DenyCooldown > MaxDenyCooldown:
		return MaxDenyCooldown
	}
	return p.DenyCooldown
}

// Deny cooldown memory bounds.
const (
	// DenyCooldownMaxEntries bounds the denials remembered in all.
	DenyCooldownMaxEntries = 4096
	// DenyCooldownMaxPerIdentity bounds the denials remembered for one identity. An identity
	// at the bound may ask nothing new until one of its cooldowns ends: it cannot evict its own
	// cooldowns by being denied more often.
	DenyCooldownMaxPerIdentity = 32
)

type cooldownKey struct{ namespace, identity, argv string }

// DenyCooldown remembers denied argv per identity for a bounded time in bounded memory.
// Safe for concurrent use. Time is passed in: no clock is read here.
type DenyCooldown struct {
	mu          sync.Mutex
	max, perID  int
	until       map[cooldownKey]time.Time
	perIdentity map[[2]string]int
}

// NewDenyCooldown returns an empty memory with the default bounds.
func NewDenyCooldown() *DenyCooldown {
	return NewDenyCooldownBounded(DenyCooldownMaxEntries, DenyCooldownMaxPerIdentity)
}

// NewDenyCooldownBounded returns an empty memory holding at most max entries, perIdentity
// of them for one identity.
func NewDenyCooldownBounded(maxEntries, perIdentity int) *DenyCooldown {
	return &DenyCooldown{max: max(1, maxEntries), perID: max(1, perIdentity),
		until: map[cooldownKey]time.Time{}, perIdentity: map[[2]string]int{}}
}

// CooldownArgvDigest is the key a denial is remembered under: the argv alone, so asking
// again under another cwd or profile is the same question.
func CooldownArgvDigest(argv []string) string { return mustDigest(nonNil(argv)) }

// Record remembers that identity's argv was denied at decidedAt, for cooldown. A zero or
// negative cooldown records nothing.
func (c *DenyCooldown) Record(namespace, identity, argvDigest string, decidedAt time.Time, cooldown time.Duration) {
	if c == nil || cooldown <= 0 {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	k := cooldownKey{namespace, identity, argvDigest}
	until := decidedAt.Add(cooldown)
	if old, ok := c.until[k]; ok {
		if until.After(old) {
			c.until[k] = until
		}
		return
	}
	c.sweepLocked(decidedAt)
	id := [2]string{namespace, identity}
	if c.perIdentity[id] >= c.perID {
		c.evictLocked(func(o cooldownKey) bool { return o.namespace == namespace && o.identity == identity })
	}
	if len(c.until) >= c.max {
		c.evictLocked(func(cooldownKey) bool { return true })
	}
	c.until[k] = until
	c.perIdentity[id]++
}

// Check refuses with consent-cooldown while identity's argv (or, with the identity at its
// bound, anything new it asks) is cooling down at now.
func (c *DenyCooldown) Check(namespace, identity, argvDigest string, now time.Time) *Refusal {
	if c == nil {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.sweepLocked(now)
	if until, ok := c.until[cooldownKey{namespace, identity, argvDigest}]; ok {
		return Refuse(CodeConsentCooldown, "spec.argv",
			"an operator denied this argv for %s; it may ask again after %s", identity, until.UTC().Format(time.RFC3339))
	}
	if c.perIdentity[[2]string{namespace, identity}] >= c.perID {
		return Refuse(CodeConsentCooldown, "spec.argv",
			"%s has %d denied requests cooling down in namespace %s; it may ask an operator again once one ends", identity, c.perID, namespace)
	}
	return nil
}

// Len is the number of remembered denials (for bounds tests).
func (c *DenyCooldown) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.until)
}

func (c *DenyCooldown) sweepLocked(now time.Time) {
	for k, u := range c.until {
		if !now.Before(u) {
			c.deleteLocked(k)
		}
	}
}

// evictLocked drops the matching entry that ends soonest.
func (c *DenyCooldown) evictLocked(match func(cooldownKey) bool) {
	var victim *cooldownKey
	var soonest time.Time
	for k, u := range c.until {
		if match(k) && (victim == nil || u.Before(soonest)) {
			k := k
			victim, soonest = &k, u
		}
	}
	if victim != nil {
		c.deleteLocked(*victim)
	}
}

func (c *DenyCooldown) deleteLocked(k cooldownKey) {
	delete(c.until, k)
	id := [2]string{k.namespace, k.identity}
	if c.perIdentity[id]--; c.perIdentity[id] <= 0 {
		delete(c.perIdentity, id)
	}
}
