package actuation

import (
	"slices"
	"testing"
)

// seedVocabulary is the table of seed 000 §7.1, copied by hand, plus the
// "emulated-vm" isolation class DESIGN §7 adds. A change to vocab.go must
// change this copy too.
var seedVocabulary = map[Dimension][]string{
	"locality":              {"local-only", "remote-sandbox"},
	"hostArchitecture":      {"x86_64", "arm64"},
	"guestArchitecture":     {"x86_64", "arm64"},
	"isolationClass":        {"none", "process-sandbox", "shared-kernel-container", "hardware-vm", "emulated-vm"},
	"systemFidelity":        {"filesystem-view", "process-runtime", "shared-kernel-linux", "full-system-linux"},
	"controlTransport":      {"none", "local-process", "virtio-vsock"},
	"controlGuestEndpoint":  {"none", "af-vsock"},
	"controlHostEndpoint":   {"none", "af-vsock", "unix-domain-socket"},
	"controlChannelBinding": {"none", "environment-generation-boot-nonce"},
	"bootMode":              {"none", "efi", "direct-kernel"},
	"storageFormats":        {"directory-copy", "raw", "kernel-initrd-rootfs"},
	"deviceClasses":         {"virtio-block", "virtio-vsock", "virtio-rng", "diagnostic-serial", "virtio-net"},
	"consoleMode":           {"none", "diagnostic-output-only"},
	"networkProfiles":       {"none", "isolated", "egress-allowlisted"},
	"hostFilesystemSharing": {"denied", "read-only", "read-write"},
	"credentialInjection":   {"denied", "explicit-scoped"},
	"resourceEnforcement":   {"host-cpu", "host-memory", "host-process", "host-storage", "host-io", "guest-vcpu", "guest-memory", "guest-pids", "guest-storage", "channel-bounds"},
	"lifecycleOperations":   {"allocate", "start", "inspect", "drain", "teardown", "recover"},
}

func TestVocabularyIsTheSeedTable(t *testing.T) {
	if len(Dimensions()) != len(seedVocabulary) {
		t.Fatalf("%d dimensions, want %d", len(Dimensions()), len(seedVocabulary))
	}
	for _, d := range Dimensions() {
		if !slices.Equal(Vocabulary(d), seedVocabulary[d]) {
			t.Errorf("Vocabulary(%s) = %v, want %v", d, Vocabulary(d), seedVocabulary[d])
		}
		for _, v := range seedVocabulary[d] {
			if !IsAdmittedValue(d, v) {
				t.Errorf("IsAdmittedValue(%s, %s) = false", d, v)
			}
		}
	}
	for _, d := range []Dimension{"", "backend", DimBackendID, "isolation/class"} {
		if Vocabulary(d) != nil {
			t.Errorf("Vocabulary(%q) must be nil", d)
		}
	}
	for _, v := range []string{"", "microVM", "container", "sandbox", "Hardware-VM", " hardware-vm"} {
		if IsAdmittedValue(DimIsolationClass, v) {
			t.Errorf("IsAdmittedValue(isolationClass, %q) = true", v)
		}
	}
	v := Vocabulary(DimLocality)
	v[0] = "mutated"
	if Vocabulary(DimLocality)[0] == "mutated" {
		t.Error("Vocabulary exposes its backing array")
	}
}
