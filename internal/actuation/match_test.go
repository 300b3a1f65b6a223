package actuation

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// capabilityFromVector returns the capability of a named capability-match
// vector.
func capabilityFromVector(t *testing.T, name string) Capability {
	t.Helper()
	for _, v := range vectorsOfKind(t, "capability-match") {
		if v.Name == name {
			var in capabilityMatchInput
			if err := json.Unmarshal(v.Input, &in); err != nil {
				t.Fatal(err)
			}
			return in.Capability
		}
	}
	t.Fatalf("no vector %q", name)
	return Capability{}
}

func TestValidateCapability(t *testing.T) {
	hw := capabilityFromVector(t, "full-system-proof-on-hardware-vm")
	if rs := ValidateCapability(hw); len(rs) != 0 {
		t.Fatalf("reference descriptor refused: %v", rs)
	}
	local := capabilityFromVector(t, "empty-requirement-matches")
	if rs := ValidateCapability(local); len(rs) != 0 {
		t.Fatalf("host-local descriptor refused: %v", rs)
	}
	bad := hw
	bad.IsolationClass = "microVM"
	bad.ConsoleMode = ""
	bad.DeviceClasses = []string{"virtio-net", "virtio-net", "gpu"}
	bad.BinaryDigest = "md5:abc"
	bad.Provider = ""
	rs := ValidateCapability(bad)
	fields := []string{}
	for _, r := range rs {
		if r.Code != CodeVocabularyUnknown {
			t.Errorf("%v: want vocabulary-unknown", r)
		}
		fields = append(fields, r.Field)
	}
	want := []string{"provider", "binaryDigest", "isolationClass", "deviceClasses[1]", "deviceClasses[2]", "consoleMode"}
	if !slices.Equal(fields, want) {
		t.Errorf("fields = %v, want %v", fields, want)
	}
	big := hw
	big.ResourceEnforcement = make([]string, MaxCapabilitySet+1)
	for i := range big.ResourceEnforcement {
		big.ResourceEnforcement[i] = "host-cpu"
	}
	if rs := ValidateCapability(big); len(rs) == 0 || rs[0].Field != "resourceEnforcement" {
		t.Errorf("unbounded set admitted: %v", rs)
	}
}

func TestValidateRequirement(t *testing.T) {
	ok := Requirement{IsolationClass: "hardware-vm", Architecture: "arm64", NetworkProfile: "none", DeviceClasses: []string{"virtio-vsock"}}
	if rs := ValidateRequirement(ok); len(rs) != 0 {
		t.Fatalf("valid requirement refused: %v", rs)
	}
	rs := ValidateRequirement(Requirement{IsolationClass: "microVM", Architecture: "amd64", NetworkProfile: "host", DeviceClasses: []string{"gpu"}})
	fields := []string{}
	for _, r := range rs {
		fields = append(fields, r.Field)
	}
	if want := []string{"architecture", "isolationClass", "networkProfile", "deviceClasses[0]"}; !slices.Equal(fields, want) {
		t.Errorf("fields = %v, want %v", fields, want)
	}
}

func TestValidateEquivalences(t *testing.T) {
	good := Equivalences{DimIsolationClass: {{"hardware-vm", "emulated-vm"}}}
	if rs := ValidateEquivalences(good); len(rs) != 0 {
		t.Fatalf("valid policy refused: %v", rs)
	}
	cases := []struct {
		eq   Equivalences
		code Code
	}{
		{Equivalences{"backend": {{"a", "b"}}}, CodeVocabularyUnknown},
		{Equivalences{DimBackendID: {{"a", "b"}}}, CodeVocabularyUnknown},
		{Equivalences{DimIsolationClass: {{"hardware-vm", "microVM"}}}, CodeVocabularyUnknown},
		{Equivalences{DimIsolationClass: {{"hardware-vm"}}}, CodePolicyInvalid},
		{Equivalences{DimIsolationClass: {{"hardware-vm", "hardware-vm"}}}, CodePolicyInvalid},
		{Equivalences{DimIsolationClass: {{"hardware-vm", "emulated-vm"}, {"emulated-vm", "none"}}}, CodePolicyInvalid},
	}
	for _, c := range cases {
		rs := ValidateEquivalences(c.eq)
		if len(rs) == 0 || rs[0].Code != c.code {
			t.Errorf("%v: %v, want %s", c.eq, rs, c.code)
		}
	}
}

func TestMatchReportsWhatTheCapabilityHas(t *testing.T) {
	hw := capabilityFromVector(t, "full-system-proof-on-hardware-vm")
	ok, unmet := Match(Requirement{NetworkProfile: "isolated", Architecture: "arm64"}, hw, nil)
	if ok || len(unmet) != 2 {
		t.Fatalf("ok=%v unmet=%v", ok, unmet)
	}
	if unmet[0].Dimension != DimGuestArchitecture || strings.Join(unmet[0].Have, ",") != "x86_64" {
		t.Errorf("unmet[0] = %+v", unmet[0])
	}
	if unmet[1].Dimension != DimNetworkProfiles || unmet[1].Want != "isolated" || strings.Join(unmet[1].Have, ",") != "none" {
		t.Errorf("unmet[1] = %+v", unmet[1])
	}
	// Match does not mutate the capability's sets while sorting Have.
	hw.DeviceClasses = []string{"virtio-vsock", "virtio-block"}
	Match(Requirement{DeviceClasses: []string{"virtio-net"}}, hw, nil)
	if hw.DeviceClasses[0] != "virtio-vsock" {
		t.Error("Match mutated the capability")
	}
}

func TestCapabilityDigestSetsAreUnordered(t *testing.T) {
	hw := capabilityFromVector(t, "full-system-proof-on-hardware-vm")
	other := hw
	other.DeviceClasses = slices.Clone(hw.DeviceClasses)
	slices.Reverse(other.DeviceClasses)
	if CapabilityDigest(hw) != CapabilityDigest(other) {
		t.Error("device class order changed the capability digest")
	}
	other.IsolationClass = "emulated-vm"
	if CapabilityDigest(hw) == CapabilityDigest(other) {
		t.Error("isolation class is not bound")
	}
}
