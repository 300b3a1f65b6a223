package internal_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
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

// TestRoomsNeverAskPlacement holds issue 26 item 4: whether an environment's processes,
// PTY programs and roots live on the host or in a VM guest is its backend's (backends.Env:
// Exec and Roots, returned by Backend.Open), so no room of the node agent branches on it,
// nor does the agent that wires them. It parses every production file under
// internal/nodeagent (the guest file implementation, guestfs, lives under
// internal/backends) and fails on a reference
// to a placement (backends.Placement, PlaceHost, PlaceGuest), the guest side of an Env
// (backends.GuestEnv, GuestCommand, an Env's .Guest or .Placement field, a root's .Guest
// or .GuestDir: where a guest root lives is the backend's file access and executor's) or
// an import of an implementation (guestenv, hostexec).
func TestRoomsNeverAskPlacement(t *testing.T) {
	forbiddenSel := map[string]bool{"Placement": true, "PlaceHost": true, "PlaceGuest": true, "GuestEnv": true, "GuestCommand": true,
		"Guest": true, "GuestDir": true}
	forbiddenImport := []string{"sensorium.dev/workbench/internal/backends/guestenv", "sensorium.dev/workbench/internal/backends/hostexec"}
	var exempt []string // the agent's wiring too: only Backend.Open decides
	files := 0
	err := filepath.WalkDir("nodeagent", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			for _, e := range exempt {
				if path == e {
					return filepath.SkipDir
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		files++
		for _, imp := range f.Imports {
			for _, fi := range forbiddenImport {
				if strings.Trim(imp.Path.Value, `"`) == fi {
					t.Errorf("%s imports %s: a room uses the backends port, never an implementation", path, fi)
				}
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			sel, ok := n.(*ast.SelectorExpr)
			if !ok || !forbiddenSel[sel.Sel.Name] {
				return true
			}
			if x, ok := sel.X.(*ast.Ident); ok && x.Name != "backends" && (sel.Sel.Name == "Placement" || sel.Sel.Name == "PlaceHost" || sel.Sel.Name == "PlaceGuest" || sel.Sel.Name == "GuestEnv" || sel.Sel.Name == "GuestCommand") {
				return true // another package's identifier of the same name
			}
			t.Errorf("%s references .%s: a room asks where an environment runs instead of using its backend's port", path, sel.Sel.Name)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("parsed %d files under internal/nodeagent: the walk did not find the rooms", files)
	}
}
