package environments

import (
	"path/filepath"
	"strings"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/backends"
	"sensorium.dev/workbench/internal/backends/fixturecopy"
	"sensorium.dev/workbench/internal/backends/hostlocal"
	"sensorium.dev/workbench/internal/backends/qemumicrovm"
	"sensorium.dev/workbench/internal/platform/fixture"
)

// TestUnenforcedResources: the room refuses a limit the backend says it does not enforce
// (resource-not-enforced), by the backend's own answer: pids on the host backends and on a
// full-system qemu-microvm.v1 variant are bounded, on an initramfs variant they are not;
// diskMiB only where a disk bounds it.
func TestUnenforcedResources(t *testing.T) {
	tmp := t.TempDir()
	vm, err := qemumicrovm.New(qemumicrovm.Config{StateDir: filepath.Join(tmp, "state"), ImageDir: filepath.Join(tmp, "images"),
		QEMUBinary: "/bin/true", VhostDeviceVsock: "/bin/true"}) // constructed only: nothing boots
	if err != nil {
		t.Fatal(err)
	}
	full := &backends.BootImage{Variant: "full", DiskPath: "disk.raw"}
	initramfs := &backends.BootImage{Variant: "min"}
	cases := []struct {
		name string
		b    backends.Backend
		spec backends.Spec
		disk bool
		want string // "" or the start of the message
	}{
		{"host-local pids", hostlocal.New(nil), backends.Spec{PIDs: 64}, false, ""},
		{"host-local disk", hostlocal.New(nil), backends.Spec{DiskMiB: 64}, false, "resources.diskMiB (64) is not enforced by host-local"},
		{"fixture-copy pids and disk", fixturecopy.New(tmp, nil, fixture.Limits{}), backends.Spec{PIDs: 64, DiskMiB: 64}, true, ""},
		{"vm initramfs pids", vm, backends.Spec{PIDs: 64, Boot: initramfs}, false, "resources.pids (64) is not enforced inside qemu-microvm.v1 guests"},
		{"vm initramfs disk", vm, backends.Spec{DiskMiB: 64, Boot: initramfs}, false, "resources.diskMiB (64) is not enforced by qemu-microvm.v1"},
		{"vm full-system pids and disk", vm, backends.Spec{PIDs: 64, DiskMiB: 64, Boot: full}, false, ""},
	}
	for _, c := range cases {
		code, msg := unenforcedResources(c.b, c.spec, c.disk)
		if c.want == "" && code != "" {
			t.Errorf("%s: refused %s: %s", c.name, code, msg)
		}
		if c.want != "" && (code != string(actuation.CodeResourceNotEnforced) || !strings.HasPrefix(msg, c.want)) {
			t.Errorf("%s: %q %q, want %s %q", c.name, code, msg, actuation.CodeResourceNotEnforced, c.want)
		}
	}
}
