package main

import (
	"os/exec"
	"strings"
	"testing"
)

// TestSandboxHelperLinksNoGuestSide holds issue 26 item 4: the sandbox helper, which every
// command and PTY program of a host environment starts through and which exists to stay
// small, knows nothing of VM guests. The guest PTY relay is the node agent's own
// subcommand (internal/backends/guestenv); the helper links no guest client, no guest
// protocol, no backend and nothing of the node agent. It reads the helper's transitive
// production imports (`go list -deps`, tests excluded). Nor does it link procexec's parent
// side (issue 27 item 2): only package procexec/sandboxhelper.
func TestSandboxHelperLinksNoGuestSide(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH: cannot list imports")
	}
	const mod = "sensorium.dev/workbench/"
	out, err := exec.Command("go", "list", "-deps", "-e", "-f", `{{.ImportPath}}{{if .Error}} ERROR:{{.Error}}{{end}}`, mod+"cmd/workbench-sandbox").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) == 0 {
		t.Fatal("go list listed no package")
	}
	forbidden := []string{mod + "internal/guestclient", mod + "guest", mod + "internal/backends", mod + "internal/nodeagent",
		// Issue 27 item 2: the helper starts once per command; the parent's cgroup manager
		// and seccomp policy builder (and their package inits) stay out of it.
		mod + "internal/platform/procexec", mod + "internal/platform/cgroups",
		"github.com/containerd", "google.golang.org/protobuf", "github.com/cilium/ebpf", "github.com/godbus",
		"github.com/elastic/go-seccomp-bpf", "github.com/moby/profiles", "github.com/opencontainers/runtime-spec"}
	seen := false
	for _, dep := range deps {
		if strings.HasPrefix(dep, "ERROR:") {
			t.Errorf("go list: %s", dep)
		}
		if dep == mod+"internal/platform/procexec/sandboxhelper" {
			seen = true
		}
		for _, f := range forbidden {
			if dep == mod+"internal/platform/procexec/sandboxhelper" {
				break
			}
			if dep == f || strings.HasPrefix(dep, f+"/") {
				t.Errorf("cmd/workbench-sandbox links %s (the sandbox helper must not know the guest side nor the parent's side: %s)", dep, f)
			}
		}
	}
	if !seen {
		t.Errorf("cmd/workbench-sandbox does not link internal/platform/procexec/sandboxhelper: the listing is not the helper's (%d packages)", len(deps))
	}
}
