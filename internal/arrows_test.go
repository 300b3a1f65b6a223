package internal_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
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
//
// Nor does a room branch on a backend's identity (what a backend can do is its own answer:
// Backend.Open's Env, backends.SourceMaterializer, backends.PIDsBounder, DiskBackend): it
// fails on a backend identity constant (wbv1.BackendFixtureCopy, BackendQEMUMicroVM,
// BackendVfkit, BackendHostLocal, ... of any package), a string literal spelling one
// ("fixture-copy.v1"), or a spec.backend compared (==, !=, switch) with a constant or
// literal. Exempt, by function (backendIdentityExempt):
//   - nodereport/node.go capabilities and publishCapabilities: the node's BackendCapability
//     reports describe the processless host backends (host-local, fixture-copy.v1) by name —
//     their fidelity, storage formats, and the process-sandbox condition they carry — while
//     the VM backends measure and attest their own descriptors (Capability); this is the
//     node's report about its backends, not a decision about one environment's work;
//
// A spec.backend compared with another field (an ImageManifest variant's backendID, the key
// the environments room resolves the backend's boot variant by, backends.ImageBooter) is a
// lookup, not a branch on the identity, and passes.
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
		checkBackendIdentity(t, path, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if files < 50 {
		t.Fatalf("parsed %d files under internal/nodeagent: the walk did not find the rooms", files)
	}
}

// backendIdentities are the backend identity constants (api/v1alpha1, internal/actuation)
// and the identities they spell.
var (
	backendIdentityNames = map[string]bool{"BackendHostLocal": true, "BackendFixtureCopy": true, "BackendQEMUMicroVM": true,
		"BackendVfkit": true, "BackendVfkitSystem": true, "BackendCloudHypervisor": true, "BackendFirecracker": true}
	backendIdentityValues = map[string]bool{"host-local": true, "fixture-copy.v1": true, "qemu-microvm.v1": true,
		"vfkit-system.v1": true, "cloud-hypervisor-system.v1": true, "firecracker-system.v1": true}
	// backendIdentityExempt: file -> functions that legitimately name backends (see
	// TestRoomsNeverAskPlacement).
	backendIdentityExempt = map[string][]string{
		filepath.Join("nodeagent", "nodereport", "node.go"): {"capabilities", "publishCapabilities"},
	}
)

// checkBackendIdentity reports every place in f (outside its exempt functions) that names
// a backend identity or compares spec.backend with a constant.
func checkBackendIdentity(t *testing.T, path string, f *ast.File) {
	t.Helper()
	isSpecBackend := func(e ast.Expr) bool {
		sel, ok := e.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Backend" {
			return false
		}
		x, ok := sel.X.(*ast.SelectorExpr)
		return ok && x.Sel.Name == "Spec"
	}
	constant := func(e ast.Expr) bool {
		for {
			switch v := e.(type) {
			case *ast.BasicLit:
				return v.Kind == token.STRING
			case *ast.SelectorExpr:
				return backendIdentityNames[v.Sel.Name]
			case *ast.ParenExpr:
				e = v.X
			case *ast.CallExpr: // a conversion: string(wbv1.BackendX), wbv1.BackendID("...")
				if len(v.Args) != 1 {
					return false
				}
				e = v.Args[0]
			default:
				return false
			}
		}
	}
	for _, d := range f.Decls {
		if fd, ok := d.(*ast.FuncDecl); ok && slices.Contains(backendIdentityExempt[path], fd.Name.Name) {
			continue
		}
		ast.Inspect(d, func(n ast.Node) bool {
			switch v := n.(type) {
			case *ast.SelectorExpr:
				if _, ok := v.X.(*ast.Ident); ok && backendIdentityNames[v.Sel.Name] {
					t.Errorf("%s names backend identity %s: a room asks the backend what it can do, never which one it is", path, v.Sel.Name)
				}
			case *ast.BasicLit:
				if v.Kind == token.STRING {
					if s, err := strconv.Unquote(v.Value); err == nil && backendIdentityValues[s] {
						t.Errorf("%s spells backend identity %q: a room asks the backend what it can do, never which one it is", path, s)
					}
				}
			case *ast.BinaryExpr:
				if (v.Op == token.EQL || v.Op == token.NEQ) && (isSpecBackend(v.X) && constant(v.Y) || isSpecBackend(v.Y) && constant(v.X)) {
					t.Errorf("%s compares spec.backend with a constant: a room asks the backend what it can do, never which one it is", path)
				}
			case *ast.SwitchStmt:
				if v.Tag != nil && isSpecBackend(v.Tag) {
					t.Errorf("%s switches on spec.backend: a room asks the backend what it can do, never which one it is", path)
				}
			}
			return true
		})
	}
}
