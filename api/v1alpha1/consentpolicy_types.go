package v1alpha1

// ConsentPolicySpec is the host's consent policy, the WorkbenchPolicy's consent block (seed
// 000: durable grants pass "a host grantability policy/capability gate"; a deny may
// "suppress repeated identical prompts for a bounded cooldown").
type ConsentPolicySpec struct {
	// durableGrants names where remembered grants (remember-exact-argv, remember-argv-prefix)
	// may be given. When the consent block is set, it is the whole list: a capability,
	// namespace or profile no rule names is offered deny and allow-once only, and a remembered
	// grant for it is refused (consent-capability-not-grantable) or, when the policy changes
	// later, stops authorizing (state Unbound, the same code). Without a consent block,
	// terminal commands may be remembered under any profile. ActionRuns are never remembered.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=atomic
	DurableGrants []DurableGrantRule `json:"durableGrants,omitempty"`
	// denyCooldownSeconds is how long, after an operator denied an argv, the same identity's
	// commands with that argv are refused (consent-cooldown) instead of asking again. 0 turns
	// the cooldown off; unset takes 300.
	// +optional
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=86400
	DenyCooldownSeconds *int64 `json:"denyCooldownSeconds,omitempty"`
}

// DurableGrantRule lets remembered grants be given for one capability, optionally only in
// some namespaces and under some profiles.
type DurableGrantRule struct {
	// capability the rule covers.
	// +required
	Capability ConsentCapability `json:"capability"`
	// namespaces the rule is limited to; empty means every namespace.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=63
	Namespaces []string `json:"namespaces,omitempty"`
	// profiles (CommandProfile names) the rule is limited to; empty means every profile.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +listType=set
	// +kubebuilder:validation:items:MaxLength=253
	Profiles []string `json:"profiles,omitempty"`
}
