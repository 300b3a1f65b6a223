package vocabdoc

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
)

const (
	actuationDir = ".."
	moduleRoot   = "../../.."
)

var docPath = filepath.Join(moduleRoot, "docs", "vocabulary.md")

// TestDocUpToDate fails when docs/vocabulary.md's generated section is not what
// `make vocabulary` writes from internal/actuation.
func TestDocUpToDate(t *testing.T) {
	want, err := Generate(actuationDir, docPath)
	if err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is stale: run `make vocabulary` and commit the result", docPath)
	}
}

// TestDeclaredEqualsList: every constant of type Code is in actuation.Codes() and the
// other way round, no value is declared twice, and every code says what it means.
func TestDeclaredEqualsList(t *testing.T) {
	entries, err := Parse(actuationDir)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]string{}
	var declared []actuation.Code
	for _, e := range entries {
		if prev, dup := seen[e.Code]; dup {
			t.Errorf("%q is declared twice (%s and %s)", e.Code, prev, e.Const)
		}
		seen[e.Code] = e.Const
		if e.Meaning == "" {
			t.Errorf("%s (%q) has no line comment saying what it refuses", e.Const, e.Code)
		}
		declared = append(declared, actuation.Code(e.Code))
	}
	slices.Sort(declared)
	if list := actuation.Codes(); !slices.Equal(declared, list) {
		for _, c := range declared {
			if !slices.Contains(list, c) {
				t.Errorf("%q is declared but not in allCodes", c)
			}
		}
		for _, c := range list {
			if !slices.Contains(declared, c) {
				t.Errorf("%q is in allCodes but not declared as a Code constant", c)
			}
		}
	}
}

func TestSplice(t *testing.T) {
	sec := Render([]Entry{{Const: "CodeX", Code: "x-y", Group: "G.", Meaning: "a | b"}})
	if !bytes.Contains(sec, []byte("| `x-y` | `CodeX` | a \\| b |")) {
		t.Fatalf("row not rendered: %s", sec)
	}
	doc := []byte("# T\n\nprose\n")
	once, err := Splice(doc, sec)
	if err != nil {
		t.Fatal(err)
	}
	twice, err := Splice(append(slices.Clone(once), "\ntail\n"...), sec)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(once, []byte("# T\n\nprose\n\n"+BeginMarker)) || bytes.Count(twice, []byte(BeginMarker)) != 1 || !bytes.HasSuffix(twice, []byte("\ntail\n")) {
		t.Fatalf("splice:\n%s\n--\n%s", once, twice)
	}
	if _, err := Splice([]byte(EndMarker+"\n"+BeginMarker), sec); err == nil {
		t.Fatal("markers out of order accepted")
	}
}

// codeLike is the shape of a refusal code: lower-case kebab with at least one dash, or a
// single lower-case word (some codes are: "immutable", "forbidden").
var codeLike = regexp.MustCompile(`^[a-z][a-z0-9]*(-[a-z0-9]+)*$`)

// codeNames are identifiers whose string values are refusal codes.
func codeName(name string) bool {
	n := strings.ToLower(name)
	return n == "code" || n == "refusal" || n == "refusalcode" || strings.HasSuffix(n, "code") && n != "exitcode" && n != "statuscode"
}

func isCodeConst(name string) bool {
	return strings.HasPrefix(name, "Code") && len(name) > 4 && name[4] >= 'A' && name[4] <= 'Z'
}

// TestNoCodeLiteralsOutsideVocabulary scans the module's non-test Go code for refusal
// codes written as string literals: a constant named Code* must be spelled
// string(actuation.CodeX) (never a literal), and a literal assigned or compared to a
// code field or variable, passed as a code to a refusal constructor, or a case of a
// switch on a code, must be a code of the closed list. New refusal codes go into
// internal/actuation/codes.go.
func TestNoCodeLiteralsOutsideVocabulary(t *testing.T) {
	known := func(s string) bool { return actuation.IsKnownCode(actuation.Code(s)) }
	var problems []string
	fset := token.NewFileSet()
	err := filepath.WalkDir(moduleRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case "bin", ".git", "testdata", "node_modules", ".local", "vendor":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || strings.HasPrefix(d.Name(), "zz_generated") {
			return nil
		}
		rel, _ := filepath.Rel(moduleRoot, path)
		if filepath.Dir(rel) == filepath.Join("internal", "actuation") {
			return nil // the list itself
		}
		f, err := parser.ParseFile(fset, path, nil, 0)
		if err != nil {
			return err
		}
		report := func(n ast.Node, lit *ast.BasicLit, why string) {
			problems = append(problems, fset.Position(n.Pos()).String()+": "+lit.Value+" "+why)
		}
		strLit := func(e ast.Expr) (*ast.BasicLit, string, bool) {
			lit, ok := e.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return nil, "", false
			}
			v, err := strconv.Unquote(lit.Value)
			if err != nil || !codeLike.MatchString(v) {
				return nil, "", false
			}
			return lit, v, true
		}
		checkUse := func(n ast.Node, e ast.Expr) {
			if lit, v, ok := strLit(e); ok && strings.Contains(v, "-") && !known(v) {
				report(n, lit, "is used as a refusal code but is not in internal/actuation/codes.go")
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.ValueSpec:
				for i, name := range n.Names {
					if i < len(n.Values) && isCodeConst(name.Name) {
						if lit, _, ok := strLit(n.Values[i]); ok {
							report(n, lit, "declares a refusal code as a literal: use string(actuation."+name.Name+") (add it to internal/actuation/codes.go)")
						}
					}
				}
			case *ast.KeyValueExpr:
				if id, ok := n.Key.(*ast.Ident); ok && codeName(id.Name) {
					checkUse(n, n.Value)
				}
			case *ast.AssignStmt:
				for i, lhs := range n.Lhs {
					if i < len(n.Rhs) && codeName(exprName(lhs)) {
						checkUse(n, n.Rhs[i])
					}
				}
			case *ast.BinaryExpr:
				if n.Op == token.EQL || n.Op == token.NEQ {
					if codeName(exprName(n.X)) {
						checkUse(n, n.Y)
					}
					if codeName(exprName(n.Y)) {
						checkUse(n, n.X)
					}
				}
			case *ast.SwitchStmt:
				if n.Tag != nil && codeName(exprName(n.Tag)) {
					for _, s := range n.Body.List {
						for _, e := range s.(*ast.CaseClause).List {
							checkUse(s, e)
						}
					}
				}
			case *ast.ReturnStmt:
				// A literal returned beside an error or its message: (spec, code, message).
				withErr := false
				for _, r := range n.Results {
					if name := exprName(r); name == "err" || name == "Error" {
						withErr = true
					}
				}
				if withErr {
					for _, r := range n.Results {
						checkUse(n, r)
					}
				}
			case *ast.CallExpr:
				if refusalConstructor(n.Fun) && len(n.Args) > 0 {
					checkUse(n, n.Args[0])
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

// exprName is the last identifier of x, x.y, x.y(...) (a call's function name: CodeOf(err)).
func exprName(e ast.Expr) string {
	switch e := e.(type) {
	case *ast.Ident:
		return e.Name
	case *ast.SelectorExpr:
		return e.Sel.Name
	case *ast.CallExpr:
		return exprName(e.Fun)
	case *ast.ParenExpr:
		return exprName(e.X)
	}
	return ""
}

// refusalConstructor tells the functions whose first argument is a refusal code.
func refusalConstructor(fun ast.Expr) bool {
	if sel, ok := fun.(*ast.SelectorExpr); ok {
		if pkg, ok := sel.X.(*ast.Ident); ok && pkg.Name == "refusal" && (sel.Sel.Name == "New" || sel.Sel.Name == "Is") {
			return true
		}
	}
	switch exprName(fun) {
	case "Refuse", "Refusef", "NewRefusal", "Refused", "refuse", "refused", "Wrap", "Errorf":
		return true
	}
	return false
}
