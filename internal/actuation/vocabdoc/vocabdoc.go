// Package vocabdoc renders the refusal-code section of docs/vocabulary.md from the
// declarations of internal/actuation (the one closed vocabulary): each constant of type
// Code, the comment that heads its group and its own line comment. `make vocabulary`
// (go generate ./internal/actuation) rewrites the section; a test fails when the
// committed file is stale.
package vocabdoc

import (
	"bytes"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// Markers around the generated section of docs/vocabulary.md.
const (
	BeginMarker = "<!-- BEGIN GENERATED refusal codes: make vocabulary; do not edit by hand -->"
	EndMarker   = "<!-- END GENERATED refusal codes -->"
)

// Entry is one refusal code as declared.
type Entry struct {
	Const   string // the Go constant, e.g. CodePathEmpty
	Code    string // its value, e.g. path-empty
	Group   string // the comment heading its group
	Meaning string // its line comment, possibly empty
}

// Parse reads every non-test Go file of dir (internal/actuation) and returns the
// constants of type Code in declaration order (codes.go first, then by file name).
func Parse(dir string) ([]Entry, error) {
	names, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return nil, err
	}
	slices.SortFunc(names, func(a, b string) int {
		ac, bc := filepath.Base(a) == "codes.go", filepath.Base(b) == "codes.go"
		switch {
		case ac && !bc:
			return -1
		case bc && !ac:
			return 1
		}
		return strings.Compare(a, b)
	})
	var out []Entry
	fset := token.NewFileSet()
	for _, name := range names {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.ParseComments)
		if err != nil {
			return nil, fmt.Errorf("parse %s: %w", name, err)
		}
		for _, d := range f.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			group := commentText(gd.Doc)
			for _, s := range gd.Specs {
				vs := s.(*ast.ValueSpec)
				if id, ok := vs.Type.(*ast.Ident); !ok || id.Name != "Code" {
					continue
				}
				if vs.Doc != nil {
					group = commentText(vs.Doc)
				}
				for i, n := range vs.Names {
					if i >= len(vs.Values) {
						return nil, fmt.Errorf("%s: %s has no value", fset.Position(n.Pos()), n.Name)
					}
					lit, ok := vs.Values[i].(*ast.BasicLit)
					if !ok || lit.Kind != token.STRING {
						return nil, fmt.Errorf("%s: %s must be a string literal", fset.Position(n.Pos()), n.Name)
					}
					v, err := strconv.Unquote(lit.Value)
					if err != nil {
						return nil, err
					}
					out = append(out, Entry{Const: n.Name, Code: v, Group: group, Meaning: commentText(vs.Comment)})
				}
			}
		}
	}
	return out, nil
}

func commentText(g *ast.CommentGroup) string {
	if g == nil {
		return ""
	}
	return strings.Join(strings.Fields(g.Text()), " ")
}

// Render returns the generated section, markers included.
func Render(entries []Entry) []byte {
	var b bytes.Buffer
	fmt.Fprintln(&b, BeginMarker)
	fmt.Fprintln(&b, "## The refusal codes (generated)")
	fmt.Fprintln(&b)
	fmt.Fprintf(&b, "The closed list of every refusal code, %d in all, generated from `internal/actuation/codes.go`\n", len(entries))
	fmt.Fprintln(&b, "(`make vocabulary`; `internal/actuation/vocabdoc` fails when this section is stale and when")
	fmt.Fprintln(&b, "a code literal outside the list appears in the code). Every refusal that reaches a status,")
	fmt.Fprintln(&b, "a data-plane response or the guest protocol carries one of these codes.")
	group := "\x00"
	for _, e := range entries {
		if e.Group != group {
			group = e.Group
			fmt.Fprintln(&b)
			if group != "" {
				fmt.Fprintf(&b, "**%s**\n\n", escape(group))
			}
			fmt.Fprintln(&b, "| code | constant | meaning |")
			fmt.Fprintln(&b, "|---|---|---|")
		}
		fmt.Fprintf(&b, "| `%s` | `%s` | %s |\n", e.Code, e.Const, escape(e.Meaning))
	}
	fmt.Fprintln(&b)
	fmt.Fprintln(&b, EndMarker)
	return b.Bytes()
}

func escape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// Splice replaces the generated section of doc (between the markers, inclusive) with
// section, or appends section when doc has none.
func Splice(doc, section []byte) ([]byte, error) {
	i := bytes.Index(doc, []byte(BeginMarker))
	j := bytes.Index(doc, []byte(EndMarker))
	switch {
	case i < 0 && j < 0:
		out := append(bytes.TrimRight(slices.Clone(doc), "\n"), '\n', '\n')
		return append(out, section...), nil
	case i < 0 || j < i:
		return nil, fmt.Errorf("the generated section's markers are missing or out of order")
	}
	j += len(EndMarker)
	if j < len(doc) && doc[j] == '\n' {
		j++
	}
	out := slices.Clone(doc[:i])
	out = append(out, section...)
	return append(out, doc[j:]...), nil
}

// Generate returns docPath's content with its generated section rebuilt from dir.
func Generate(dir, docPath string) ([]byte, error) {
	entries, err := Parse(dir)
	if err != nil {
		return nil, err
	}
	doc, err := os.ReadFile(docPath)
	if err != nil {
		return nil, err
	}
	return Splice(doc, Render(entries))
}
