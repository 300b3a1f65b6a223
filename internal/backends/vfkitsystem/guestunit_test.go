package vfkitsystem

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// unitDir is the guest image's systemd sources, from this package's directory.
const unitDir = "../../../hack/guest-image/system"

// uncommented drops comment lines (systemd's '#' and ';') from unit text.
func uncommented(s string) string {
	var b strings.Builder
	for _, l := range strings.SplitAfter(s, "\n") {
		if t := strings.TrimSpace(l); strings.HasPrefix(t, "#") || strings.HasPrefix(t, ";") {
			continue
		}
		b.WriteString(l)
	}
	return strings.TrimLeft(b.String(), "\n")
}

// installUnit runs the image build's own installer for arch into a fresh overlay.
func installUnit(t *testing.T, arch string) string {
	t.Helper()
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("bash not found: agent-unit.sh cannot run")
	}
	ov := t.TempDir()
	out, err := exec.Command("bash", filepath.Join(unitDir, "agent-unit.sh"), arch, ov).CombinedOutput()
	if err != nil {
		t.Fatalf("agent-unit.sh %s: %v\n%s", arch, err, out)
	}
	return filepath.Join(ov, "etc/systemd/system")
}

// execStarts returns the ExecStart lines of unit text in order (an empty one resets).
func execStarts(s string) []string {
	var r []string
	for _, l := range strings.Split(s, "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "ExecStart="); ok {
			if v == "" {
				r = nil
				continue
			}
			r = append(r, v)
		}
	}
	return r
}

// TestArm64AgentUnitReadsTheBindingDisk: the arm64 variant's agent unit, as the image
// build installs it, starts the agent with --binding-file on the binding disk this
// backend attaches (serial BindingDiskID) and after that device exists; the drop-in is
// the one the plan renders; the x86_64 variant keeps fw_cfg (no drop-in).
func TestArm64AgentUnitReadsTheBindingDisk(t *testing.T) {
	file, err := os.ReadFile(filepath.Join(unitDir, "vfkit-binding.conf"))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := uncommented(string(file)), GuestAgentDropIn(); got != want {
		t.Fatalf("hack/guest-image/system/vfkit-binding.conf differs from GuestAgentDropIn:\n--- file\n%s\n--- plan\n%s", got, want)
	}
	if GuestBindingFile != "/dev/disk/by-id/virtio-wb-binding" {
		t.Fatalf("GuestBindingFile = %q: udev names a virtio-blk disk with serial %q /dev/disk/by-id/virtio-%s", GuestBindingFile, BindingDiskID, BindingDiskID)
	}
	if esc, err := exec.Command("systemd-escape", "--path", "--suffix=device", GuestBindingFile).Output(); err == nil {
		if got := strings.TrimSpace(string(esc)); got != GuestBindingDeviceUnit {
			t.Fatalf("systemd-escape says the device unit is %q, the drop-in uses %q", got, GuestBindingDeviceUnit)
		}
	} else {
		t.Logf("systemd-escape not usable (%v): device unit name checked against the constant only", err)
	}

	sys := installUnit(t, "arm64")
	unit, err := os.ReadFile(filepath.Join(sys, "workbench-guest.service"))
	if err != nil {
		t.Fatal(err)
	}
	drop, err := os.ReadFile(filepath.Join(sys, "workbench-guest.service.d", "vfkit-binding.conf"))
	if err != nil {
		t.Fatalf("arm64 overlay has no binding drop-in: %v", err)
	}
	if _, err := os.Stat(filepath.Join(sys, "multi-user.target.wants", "workbench-guest.service")); err != nil {
		t.Fatalf("arm64 unit not enabled: %v", err)
	}
	// systemd reads the unit, then its drop-ins: the effective ExecStart is the last list.
	effective := execStarts(string(unit) + "\n" + string(drop))
	want := GuestAgentCommand + " --binding-file=" + GuestBindingFile
	if len(effective) != 1 || effective[0] != want {
		t.Fatalf("arm64 effective ExecStart = %q, want [%q]", effective, want)
	}
	for _, dep := range []string{"Requires=", "After="} {
		if !strings.Contains(string(drop), dep+GuestBindingDeviceUnit+"\n") {
			t.Fatalf("arm64 drop-in lacks %s%s:\n%s", dep, GuestBindingDeviceUnit, drop)
		}
	}
	// The base unit's own command is the plan's (the drop-in only adds the binding file).
	if base := execStarts(string(unit)); len(base) != 1 || base[0] != GuestAgentCommand {
		t.Fatalf("workbench-guest.service ExecStart = %q, want [%q]", base, GuestAgentCommand)
	}

	sys = installUnit(t, "amd64")
	if _, err := os.Stat(filepath.Join(sys, "workbench-guest.service.d")); !os.IsNotExist(err) {
		t.Fatalf("amd64 overlay has a drop-in directory (%v): its agent reads fw_cfg", err)
	}
	unit, err = os.ReadFile(filepath.Join(sys, "workbench-guest.service"))
	if err != nil {
		t.Fatal(err)
	}
	if got := execStarts(string(unit)); len(got) != 1 || strings.Contains(got[0], "--binding-file") {
		t.Fatalf("amd64 ExecStart = %q, want the fw_cfg default", got)
	}
	if out, err := exec.Command("bash", filepath.Join(unitDir, "agent-unit.sh"), "riscv64", t.TempDir()).CombinedOutput(); err == nil {
		t.Fatalf("agent-unit.sh accepted an unknown architecture: %s", out)
	}
}
