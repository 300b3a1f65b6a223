package actuation

import "testing"

func TestEffectiveContext(t *testing.T) {
	cases := []struct {
		candidate ContextClass
		network   string
		share     string
		want      ContextClass
	}{
		{ContextExperimental, "none", "denied", ContextExperimental},
		{ContextExperimental, "", "", ContextExperimental},
		{ContextExperimental, "isolated", "denied", ContextTest},
		{ContextResearch, "none", "read-only", ContextTest},
		{ContextResearch, "egress-allowlisted", "read-write", ContextTest},
		{ContextTest, "isolated", "denied", ContextTest},
		{ContextProduction, "isolated", "denied", ContextProduction},
		{ContextCritical, "none", "denied", ContextCritical},
		{ContextExperimental, "bogus", "denied", ContextTest}, // an unknown profile counts as networked
		{"", "none", "denied", ""},
		{"staging", "none", "denied", ""},
	}
	for _, c := range cases {
		if got := EffectiveContext(c.candidate, c.network, c.share); got != c.want {
			t.Errorf("EffectiveContext(%q, %q, %q) = %q, want %q", c.candidate, c.network, c.share, got, c.want)
		}
	}
	if got := MaxContext(ContextTest, ContextProduction, ContextResearch); got != ContextProduction {
		t.Errorf("MaxContext = %q", got)
	}
	if got := MaxContext(ContextTest, "unknown"); got != "" {
		t.Errorf("MaxContext with an unknown class = %q, want \"\"", got)
	}
	if got := MaxContext(); got != "" {
		t.Errorf("MaxContext() = %q", got)
	}
}

func TestValidateOperationalContext(t *testing.T) {
	for _, c := range ContextClasses() {
		if rs := ValidateOperationalContext(c, "ok"); len(rs) != 0 {
			t.Errorf("%s refused: %v", c, rs)
		}
	}
	long := make([]byte, MaxSummaryBytes+1)
	for i := range long {
		long[i] = 'x'
	}
	rs := ValidateOperationalContext("", string(long))
	if len(rs) != 2 || rs[0].Code != CodeVocabularyUnknown || rs[1].Code != CodeSummaryTooLarge {
		t.Errorf("refusals = %v", rs)
	}
	if rs := ValidateOperationalContext(ContextTest, string(long[:MaxSummaryBytes])); len(rs) != 0 {
		t.Errorf("summary at the limit refused: %v", rs)
	}
}

func TestPlanDigest(t *testing.T) {
	p := Plan{BackendID: "qemu-microvm.v1", Requirement: Requirement{IsolationClass: "emulated-vm", DeviceClasses: []string{"virtio-vsock", "virtio-block"}},
		CapabilityRef: "node-a/qemu", CapabilityDigest: ContextDigest(ContextTest, "cap"), EffectiveContext: ContextTest,
		CandidateContextDigest: ContextDigest(ContextExperimental, "offline"), ImageRef: "img", VCPUs: 1, MemoryMiB: 512, DiskMiB: 1024, PIDs: 256}
	base := PlanDigest(p)
	q := p
	q.Requirement.DeviceClasses = []string{"virtio-block", "virtio-vsock"}
	if PlanDigest(q) != base {
		t.Error("device class order changed the plan digest")
	}
	if p.Requirement.DeviceClasses[0] != "virtio-vsock" {
		t.Error("PlanDigest mutated its input")
	}
	for name, mutate := range map[string]func(*Plan){
		"context":   func(x *Plan) { x.EffectiveContext = ContextProduction },
		"candidate": func(x *Plan) { x.CandidateContextDigest = ContextDigest(ContextTest, "offline") },
		"policy":    func(x *Plan) { x.PolicyRef = "policy:strict" },
		"image":     func(x *Plan) { x.ImageRef = "img2" },
		"memory":    func(x *Plan) { x.MemoryMiB++ },
	} {
		x := p
		mutate(&x)
		if PlanDigest(x) == base {
			t.Errorf("changing %s does not change the plan digest", name)
		}
	}
}
