package internal_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestNoArrowRunsBackUp holds issue 26's layering: the platform packages, the backends and
// the aggregated API server import nothing under internal/nodeagent (errors flow down as
// actuation.Refusal; wire contracts are packages of their own), and the controllers
// import no webhook (shared rules live in internal/actuation), and nothing under
// internal/nodeagent imports the agent that wires the rooms. It reads the transitive
// production imports (`go list -deps`, tests excluded) of every package of each layer.
func TestNoArrowRunsBackUp(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH: cannot list imports")
	}
	const mod = "sensorium.dev/workbench/"
	for _, rule := range []struct {
		from      []string
		forbidden string
	}{
		{[]string{mod + "internal/platform/...", mod + "internal/backends/...", mod + "internal/apiserver/..."}, mod + "internal/nodeagent/"},
		{[]string{mod + "controllers/..."}, mod + "webhooks"},
		// The node agent's rooms (and every other package under internal/nodeagent) are
		// wired by agent and never reach back into it.
		{[]string{mod + "internal/nodeagent/..."}, mod + "internal/nodeagent/agent"},
	} {
		for _, from := range rule.from {
			args := append([]string{"list", "-e", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}{{if .Error}} ERROR:{{.Error}}{{end}}`}, from)
			out, err := exec.Command("go", args...).CombinedOutput()
			if err != nil {
				t.Fatalf("go list %s: %v\n%s", from, err, out)
			}
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			if len(lines) == 0 || lines[0] == "" {
				t.Fatalf("go list %s listed no package", from)
			}
			for _, line := range lines {
				fields := strings.Fields(line)
				if strings.Contains(line, " ERROR:") {
					t.Errorf("go list %s: %s", from, line)
					continue
				}
				for _, dep := range fields[1:] {
					if dep == strings.TrimSuffix(rule.forbidden, "/") || strings.HasPrefix(dep, strings.TrimSuffix(rule.forbidden, "/")+"/") {
						t.Errorf("%s imports %s (an arrow back up: %s must not depend on %s)", fields[0], dep, from, rule.forbidden)
					}
				}
			}
		}
	}
}
