package actuation

import "testing"

func TestContextFloorFromSelectedCapability(t *testing.T) {
	offline := Capability{NetworkProfiles: []string{"none"}, HostFilesystemSharing: "denied"}
	hostShare := Capability{NetworkProfiles: []string{"none"}, HostFilesystemSharing: "read-write"}
	netChoice := Capability{NetworkProfiles: []string{"none", "isolated"}, HostFilesystemSharing: "denied"}
	cases := []struct {
		name string
		c    Capability
		req  Requirement
		want ContextClass
	}{
		{"offline backend, nothing required", offline, Requirement{}, ContextExperimental},
		{"offline backend, none required", offline, Requirement{NetworkProfile: "none", HostFilesystemSharing: "denied"}, ContextExperimental},
		// The requirement left sharing unspecified, but the selected backend shares the host.
		{"host-sharing backend, nothing required", hostShare, Requirement{}, ContextTest},
		// A requirement cannot lower what the backend does.
		{"host-sharing backend, denied required", hostShare, Requirement{HostFilesystemSharing: "denied"}, ContextTest},
		{"network offered, nothing required", netChoice, Requirement{}, ContextTest},
		{"network offered, none required", netChoice, Requirement{NetworkProfile: "none"}, ContextExperimental},
		{"network offered and required", netChoice, Requirement{NetworkProfile: "isolated"}, ContextTest},
		{"unknown sharing fails closed", Capability{NetworkProfiles: []string{"none"}}, Requirement{}, ContextTest},
		{"no network profiles fails closed", Capability{HostFilesystemSharing: "denied"}, Requirement{}, ContextTest},
	}
	for _, c := range cases {
		if got := ContextFloor(c.c, c.req); got != c.want {
			t.Errorf("%s: ContextFloor = %q, want %q", c.name, got, c.want)
		}
	}
}

func TestPlanContext(t *testing.T) {
	offline := Capability{NetworkProfiles: []string{"none"}, HostFilesystemSharing: "denied"}
	hostShare := Capability{NetworkProfiles: []string{"none"}, HostFilesystemSharing: "read-only"}
	cases := []struct {
		name     string
		declared ContextClass
		c        Capability
		earlier  []ContextClass
		want     ContextClass
	}{
		{"no declaration is the test default", "", offline, nil, ContextTest},
		{"experimental offline stays experimental", ContextExperimental, offline, nil, ContextExperimental},
		{"experimental on a host-sharing backend is floored to test", ContextExperimental, hostShare, nil, ContextTest},
		{"research floored", ContextResearch, hostShare, nil, ContextTest},
		{"production above the floor", ContextProduction, hostShare, nil, ContextProduction},
		{"critical", ContextCritical, offline, nil, ContextCritical},
		{"a re-plan never lowers what was published", ContextTest, offline, []ContextClass{ContextProduction}, ContextProduction},
		{"an empty earlier context is ignored", ContextResearch, offline, []ContextClass{""}, ContextResearch},
		{"raise above the earlier context", ContextCritical, offline, []ContextClass{ContextProduction}, ContextCritical},
		{"unknown candidate fails closed", "staging", offline, nil, ""},
	}
	for _, c := range cases {
		if got := PlanContext(c.declared, c.c, Requirement{}, c.earlier...); got != c.want {
			t.Errorf("%s: PlanContext = %q, want %q", c.name, got, c.want)
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

func TestCheckContextChange(t *testing.T) {
	cases := []struct {
		from, to ContextClass
		lowered  bool
	}{
		{ContextTest, ContextTest, false},
		{ContextTest, ContextProduction, false},
		{ContextExperimental, ContextCritical, false},
		{ContextProduction, ContextTest, true},
		{ContextCritical, ContextExperimental, true},
		{ContextResearch, ContextExperimental, true},
		// absent is the test default on both sides
		{"", ContextTest, false},
		{"", ContextProduction, false},
		{"", ContextExperimental, true},
		{ContextProduction, "", true},
		{ContextResearch, "", false},
		// unknown classes are ValidateOperationalContext's to refuse
		{ContextProduction, "staging", false},
		{"staging", ContextExperimental, false},
	}
	for _, c := range cases {
		r := CheckContextChange(c.from, c.to)
		if c.lowered != (r != nil) {
			t.Errorf("CheckContextChange(%q, %q) = %v, want lowered=%v", c.from, c.to, r, c.lowered)
			continue
		}
		if r != nil && (r.Code != CodeOperationalContextLowered || !IsKnownCode(r.Code)) {
			t.Errorf("CheckContextChange(%q, %q) code = %q", c.from, c.to, r.Code)
		}
	}
}

func TestCheckAdmissionContext(t *testing.T) {
	cases := []struct {
		under, now ContextClass
		stale      bool
	}{
		{"", ContextProduction, false}, // no recorded context: not bound to one
		{ContextTest, ContextTest, false},
		{ContextTest, ContextProduction, true},
		{ContextProduction, ContextCritical, true},
		{ContextProduction, "", true}, // the environment lost its context: fail closed
	}
	for _, c := range cases {
		r := CheckAdmissionContext(c.under, c.now)
		if c.stale != (r != nil) {
			t.Errorf("CheckAdmissionContext(%q, %q) = %v, want stale=%v", c.under, c.now, r, c.stale)
			continue
		}
		if r != nil && (r.Code != CodeOperationalContextSuperseded || !IsKnownCode(r.Code)) {
			t.Errorf("CheckAdmissionContext(%q, %q) code = %q", c.under, c.now, r.Code)
		}
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
