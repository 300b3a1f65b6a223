package internal_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestOneRefusalType holds issue 26's one refusal type: the only Go error type named
// *Refusal* in the tree's production code is internal/actuation's Refusal. The guest
// protocol keeps only its wire fields (a code and a message in its frames and results);
// the guest agent and guestclient convert at that edge, and a guest refusal is told from
// the node's by a marker (guestclient.ErrGuestRefused), not by a type of its own.
func TestOneRefusalType(t *testing.T) {
	root := moduleRoot(t)
	fset := token.NewFileSet()
	found := 0
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "vendor", "bin", "testdata", "node_modules":
				return filepath.SkipDir
			}
			if strings.HasPrefix(d.Name(), ".") && path != root {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for _, decl := range f.Decls {
			fn, ok := decl.(*ast.FuncDecl)
			if !ok || fn.Recv == nil || len(fn.Recv.List) != 1 || fn.Name.Name != "Error" || !returnsOneString(fn.Type) || fn.Type.Params.NumFields() != 0 {
				continue
			}
			name := receiverName(fn.Recv.List[0].Type)
			if !strings.Contains(strings.ToLower(name), "refusal") {
				continue
			}
			if filepath.ToSlash(filepath.Dir(rel)) == "internal/actuation" && name == "Refusal" {
				found++
				continue
			}
			t.Errorf("%s: error type %s is a second refusal type: build *actuation.Refusal (actuation.Refusef/Wrapf) and read it with actuation.CodeOf", fset.Position(fn.Pos()), name)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if found != 1 {
		t.Fatalf("found %d Error methods of internal/actuation.Refusal, want 1: the scan does not see the tree", found)
	}
}

// TestGuestLinksNoKubernetes holds that the guest binary and its protocol stay free of
// Kubernetes: everything under guest/ (its agent and guest/protocol/v1, which the node's
// guestclient imports too) depends on no k8s.io or sigs.k8s.io package.
func TestGuestLinksNoKubernetes(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("the go command is not on PATH: cannot list imports")
	}
	out, err := exec.Command("go", "list", "-e", "-f", `{{.ImportPath}}{{range .Deps}} {{.}}{{end}}{{if .Error}} ERROR:{{.Error}}{{end}}`, "sensorium.dev/workbench/guest/...").CombinedOutput()
	if err != nil {
		t.Fatalf("go list guest/...: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) < 2 {
		t.Fatalf("go list guest/... listed %d packages, want the agent, the protocol and the binary", len(lines))
	}
	for _, line := range lines {
		if strings.Contains(line, " ERROR:") {
			t.Errorf("go list: %s", line)
			continue
		}
		fields := strings.Fields(line)
		for _, dep := range fields[1:] {
			if strings.HasPrefix(dep, "k8s.io/") || strings.HasPrefix(dep, "sigs.k8s.io/") {
				t.Errorf("%s imports %s: the guest links no Kubernetes", fields[0], dep)
			}
		}
	}
}

func returnsOneString(ft *ast.FuncType) bool {
	if ft.Results == nil || len(ft.Results.List) != 1 || len(ft.Results.List[0].Names) > 1 {
		return false
	}
	id, ok := ft.Results.List[0].Type.(*ast.Ident)
	return ok && id.Name == "string"
}

// receiverName is the type name of a method receiver (T, *T, T[P], *T[P]).
func receiverName(e ast.Expr) string {
	for {
		switch x := e.(type) {
		case *ast.StarExpr:
			e = x.X
		case *ast.IndexExpr:
			e = x.X
		case *ast.IndexListExpr:
			e = x.X
		case *ast.ParenExpr:
			e = x.X
		case *ast.Ident:
			return x.Name
		default:
			return ""
		}
	}
}

// moduleRoot is the module's directory: the parent of this package's (go test runs a
// test in its package's directory).
func moduleRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("no go.mod above internal/: %v", err)
	}
	return root
}
