// Command onerefusal moves the tree onto the one refusal type of issue 26
// item 3: actuation.Refusal is the only coded error, actuation.CodeOf the only
// way to read its code. It rewrites, in every Go file of the module:
//
//   - alias constants `X = string(actuation.CodeY)` (in any package): their
//     declarations go and every use becomes `string(actuation.CodeY)`;
//   - internal/nodeagent/refusal (deleted): New -> actuation.Refusef,
//     CodeOf -> actuation.CodeOf, Is -> a code comparison, Error -> Refusal;
//   - the other coded error types and CodeOf copies (fsaccess.Error/Errorf/
//     Wrap/CodeOf, fairshare.Refusal,
//     treehash/waits/hostlocal/fixturecopy/skills CodeOf): their declarations
//     go and their uses become the actuation forms.
//
// The guest protocol's refusal (guest/protocol/v1 Refusal, Refusef, CodeOf)
// stays its own type: the host's guest file and command paths tell a guest
// refusal from a host one by its type (guestfs maps the first and passes the
// second through), so collapsing it is a hand change with its own tests.
//
// It uses only the standard library, parses without type information and is
// idempotent: run it again after merging a branch that still says refusal.X.
// hack/refactor/one-refusal.sh runs it and checks the result builds.
package main

import (
	"bytes"
	"flag"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
)

const (
	module  = "sensorium.dev/workbench"
	actPath = module + "/internal/actuation"
	// refusalDir is the node-side refusal package this rewrite deletes.
	refusalDir = "internal/nodeagent/refusal"
)

type kind int

const (
	kAlias        kind = iota // constant: use -> string(actuation.CodeY)
	kNew                      // F(code, format, args...) -> actuation.Refusef(code, format, args...)
	kWrap                     // F(code, cause, format, args...) -> actuation.Wrapf(code, cause, format, args...)
	kCodeOfString             // F(err) -> string(actuation.CodeOf(err))
	kCodeOfCode               // F(err) -> actuation.CodeOf(err)
	kIs                       // F(err, code) -> (string(actuation.CodeOf(err)) == code)
	kType                     // T -> actuation.Refusal
)

type sym struct {
	kind kind
	code string // kAlias: the actuation constant it names
}

// fixed lists the coded error types and CodeOf copies that collapse into
// actuation.Refusal / actuation.CodeOf, by import path and name.
var fixed = map[string]map[string]kind{
	module + "/internal/nodeagent/refusal":    {"New": kNew, "CodeOf": kCodeOfString, "Is": kIs, "Error": kType},
	module + "/internal/platform/fsaccess":    {"Errorf": kNew, "Wrap": kWrap, "CodeOf": kCodeOfString, "Error": kType},
	module + "/internal/platform/fairshare":   {"Refusal": kType},
	module + "/internal/platform/treehash":    {"CodeOf": kCodeOfString},
	module + "/internal/nodeagent/waits":      {"CodeOf": kCodeOfString},
	module + "/internal/backends/hostlocal":   {"CodeOf": kCodeOfString},
	module + "/internal/backends/fixturecopy": {"CodeOf": kCodeOfString},
	module + "/internal/skills":               {"CodeOf": kCodeOfCode},
}

type file struct {
	path    string // relative to the module root
	dir     string // relative directory
	pkgPath string // import path of its directory
	ast     *ast.File
	src     []byte
}

type tree struct {
	fset     *token.FileSet
	files    []*file
	pkgNames map[string]string          // import path -> package name (non-test)
	qual     map[string]map[string]sym  // import path -> name -> sym (non-test declarations)
	unqual   map[string]map[string]sym  // dir|package name -> name -> sym (all declarations)
	declared map[string]map[string]bool // dir|package name -> top-level names
	actCodes map[string]bool            // the Code constants of internal/actuation
}

// refusalNames are the constants of the deleted internal/nodeagent/refusal, for
// branches merged after it went.
var refusalNames = map[string]string{
	"SessionCapReached": "CodeSessionCapReached", "ReaderCapReached": "CodeReaderCapReached",
	"QueueFull": "CodeQueueFull", "EventBufferFull": "CodeEventBufferFull",
	"TimeoutAboveMax": "CodeTimeoutAboveMax", "EgressForbidden": "CodeEgressForbidden",
	"Interrupted": "CodeInterrupted", "LandlockUnavailable": "CodeLandlockUnavailable",
	"UserNamespaceUnavailable": "CodeUserNamespaceUnavailable", "IdmapUnavailable": "CodeIdmapUnavailable",
	"SeccompUnavailable": "CodeSeccompUnavailable", "OutputCapAboveMax": "CodeOutputCapAboveMax",
	"InputTooLarge": "CodeInputTooLarge", "CommandCapReached": "CodeCommandCapReached",
	"InvalidSpec": "CodeInvalidSpec", "SessionExists": "CodeSessionExists",
	"SessionNotRunning": "CodeSessionNotRunning", "SandboxSetupFailed": "CodeSandboxSetupFailed",
	"CleanupIncomplete": "CodeCleanupIncomplete", "CgroupUnavailable": "CodeCgroupUnavailable",
}

func main() {
	root := flag.String("root", ".", "module root")
	maxPasses := flag.Int("passes", 6, "rewrite passes (until nothing changes)")
	flag.Parse()
	if err := os.Chdir(*root); err != nil {
		fail(err)
	}
	total := 0
	for pass := 1; pass <= *maxPasses; pass++ {
		t, err := load()
		if err != nil {
			fail(err)
		}
		n, err := t.rewrite()
		if err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "onerefusal: pass %d rewrote %d files\n", pass, n)
		total += n
		if n == 0 {
			break
		}
	}
	if _, err := os.Stat(refusalDir); err == nil {
		if err := os.RemoveAll(refusalDir); err != nil {
			fail(err)
		}
		fmt.Fprintf(os.Stderr, "onerefusal: removed %s\n", refusalDir)
	}
	fmt.Fprintf(os.Stderr, "onerefusal: %d file rewrites in all\n", total)
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "onerefusal:", err)
	os.Exit(1)
}

func load() (*tree, error) {
	t := &tree{fset: token.NewFileSet(), pkgNames: map[string]string{actPath: "actuation", module + "/" + refusalDir: "refusal"}, declared: map[string]map[string]bool{}, actCodes: map[string]bool{}, qual: map[string]map[string]sym{}, unqual: map[string]map[string]sym{}}
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch name := d.Name(); {
			case p == ".":
				return nil
			case name == "bin" && filepath.Dir(p) == ".", name == "vendor", name == "testdata",
				strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_"),
				p == "hack/refactor", p == "internal/actuation":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || d.Type()&fs.ModeSymlink != 0 {
			return nil
		}
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		f, err := parser.ParseFile(t.fset, p, src, parser.ParseComments|parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		dir := filepath.ToSlash(filepath.Dir(p))
		t.files = append(t.files, &file{path: p, dir: dir, pkgPath: module + "/" + dir, ast: f, src: src})
		return nil
	})
	if err != nil {
		return nil, err
	}
	if err := t.loadActuationCodes(); err != nil {
		return nil, err
	}
	for _, f := range t.files {
		key := f.dir + "|" + f.ast.Name.Name
		if t.declared[key] == nil {
			t.declared[key] = map[string]bool{}
		}
		for _, d := range f.ast.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if d.Recv == nil {
					t.declared[key][d.Name.Name] = true
				}
			case *ast.GenDecl:
				for _, sp := range d.Specs {
					switch sp := sp.(type) {
					case *ast.ValueSpec:
						for _, n := range sp.Names {
							t.declared[key][n.Name] = true
						}
					case *ast.TypeSpec:
						t.declared[key][sp.Name.Name] = true
					}
				}
			}
		}
	}
	for n, c := range refusalNames {
		if t.qual[module+"/"+refusalDir] == nil {
			t.qual[module+"/"+refusalDir] = map[string]sym{}
		}
		if _, ok := t.qual[module+"/"+refusalDir][n]; !ok {
			t.qual[module+"/"+refusalDir][n] = sym{kind: kAlias, code: c}
		}
	}
	for n, k := range fixed[module+"/"+refusalDir] {
		if _, ok := t.qual[module+"/"+refusalDir][n]; !ok {
			t.qual[module+"/"+refusalDir][n] = sym{kind: k}
		}
	}
	for _, f := range t.files {
		name := f.ast.Name.Name
		test := strings.HasSuffix(f.path, "_test.go")
		if !test && !strings.HasSuffix(name, "_test") {
			t.pkgNames[f.pkgPath] = name
		}
		for n, k := range fixed[f.pkgPath] {
			if strings.HasSuffix(name, "_test") {
				continue
			}
			t.add(f, n, sym{kind: k}, !test)
		}
		act := importName(f.ast, actPath, "actuation")
		if act == "" {
			continue
		}
		for _, d := range f.ast.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok || g.Tok != token.CONST {
				continue
			}
			for _, s := range g.Specs {
				if name, code, ok := aliasSpec(s.(*ast.ValueSpec), act); ok {
					t.add(f, name, sym{kind: kAlias, code: code}, !test && !strings.HasSuffix(f.ast.Name.Name, "_test"))
				}
			}
		}
	}
	return t, nil
}

func (t *tree) add(f *file, name string, s sym, exported bool) {
	key := f.dir + "|" + f.ast.Name.Name
	if t.unqual[key] == nil {
		t.unqual[key] = map[string]sym{}
	}
	t.unqual[key][name] = s
	if exported {
		if t.qual[f.pkgPath] == nil {
			t.qual[f.pkgPath] = map[string]sym{}
		}
		t.qual[f.pkgPath][name] = s
	}
}

// aliasSpec recognises `Name = string(<act>.CodeY)`.
func aliasSpec(vs *ast.ValueSpec, act string) (string, string, bool) {
	if len(vs.Names) != 1 || len(vs.Values) != 1 || vs.Type != nil {
		return "", "", false
	}
	call, ok := vs.Values[0].(*ast.CallExpr)
	if !ok || len(call.Args) != 1 || !isIdent(call.Fun, "string") {
		return "", "", false
	}
	sel, ok := call.Args[0].(*ast.SelectorExpr)
	if !ok || !isIdent(sel.X, act) || !strings.HasPrefix(sel.Sel.Name, "Code") {
		return "", "", false
	}
	if vs.Names[0].Name == "_" {
		return "", "", false
	}
	return vs.Names[0].Name, sel.Sel.Name, true
}

func isIdent(e ast.Expr, name string) bool {
	id, ok := e.(*ast.Ident)
	return ok && id.Name == name
}

// importName returns the local name under which f imports path ("" when it
// does not), def being the package's own name.
func importName(f *ast.File, path, def string) string {
	for _, im := range f.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		if p != path {
			continue
		}
		if im.Name != nil {
			return im.Name.Name
		}
		return def
	}
	return ""
}

// rewrite applies one pass; it returns how many files it changed.
func (t *tree) rewrite() (int, error) {
	changed := 0
	for _, f := range t.files {
		if f.dir == refusalDir {
			continue
		}
		out, err := t.rewriteFile(f)
		if err != nil {
			return changed, fmt.Errorf("%s: %w", f.path, err)
		}
		if out == nil || bytes.Equal(out, f.src) {
			continue
		}
		if err := os.WriteFile(f.path, out, 0o644); err != nil {
			return changed, err
		}
		changed++
	}
	return changed, nil
}

type fileRewriter struct {
	t       *tree
	f       *file
	act     string            // local name of the actuation import
	imports map[string]string // local name -> import path (module-internal only)
	unqual  map[string]sym
	dirty   bool
}

func (t *tree) rewriteFile(f *file) ([]byte, error) {
	r := &fileRewriter{t: t, f: f, imports: map[string]string{}, unqual: t.unqual[f.dir+"|"+f.ast.Name.Name]}
	r.act = importName(f.ast, actPath, "actuation")
	if r.act == "" {
		r.act = "actuation"
	}
	for _, im := range f.ast.Imports {
		p, _ := strconv.Unquote(im.Path.Value)
		name, ok := t.pkgNames[p]
		if !ok && !strings.Contains(strings.Split(p, "/")[0], ".") {
			// A standard library package: its name is the last element.
			name, ok = p[strings.LastIndex(p, "/")+1:], true
		}
		if !ok {
			continue
		}
		if im.Name != nil {
			name = im.Name.Name
		}
		r.imports[name] = p
	}
	drop := map[*ast.CommentGroup]bool{}
	r.deleteDecls(drop)
	for _, d := range f.ast.Decls {
		walk(reflect.ValueOf(d), r.expr)
	}
	ast.Inspect(f.ast, r.switchStmt)
	used := usedNames(f.ast)
	r.dropUnusedImports(used)
	if !r.dirty {
		return nil, nil
	}
	// Comments of deleted declarations go with them.
	var kept []*ast.CommentGroup
	for _, c := range f.ast.Comments {
		if !drop[c] {
			kept = append(kept, c)
		}
	}
	f.ast.Comments = kept
	needAct := used[r.act] && importName(f.ast, actPath, "actuation") == ""
	var buf bytes.Buffer
	if err := format.Node(&buf, t.fset, f.ast); err != nil {
		return nil, err
	}
	src := tidyImports(buf.Bytes())
	if needAct {
		src = addImport(src, actPath)
	}
	out, err := format.Source(src)
	if err != nil {
		return nil, fmt.Errorf("format: %w\n%s", err, src)
	}
	return out, nil
}

// deleteDecls removes, from the declaring package, the alias constants and
// the fixed symbols this rewrite replaces.
func (r *fileRewriter) deleteDecls(drop map[*ast.CommentGroup]bool) {
	own := r.unqual
	if own == nil {
		return
	}
	dropRange := func(from, to token.Pos) {
		for _, c := range r.f.ast.Comments {
			if c.Pos() >= from && c.End() <= to {
				drop[c] = true
			}
		}
	}
	decls := r.f.ast.Decls[:0]
	for _, d := range r.f.ast.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			name := d.Name.Name
			if d.Recv != nil && len(d.Recv.List) == 1 {
				name = recvType(d.Recv.List[0].Type)
				if s, ok := own[name]; !ok || s.kind != kType {
					break
				}
			} else if s, ok := own[name]; !ok || s.kind == kAlias || s.kind == kType {
				break
			}
			r.dirty = true
			if d.Doc != nil {
				drop[d.Doc] = true
			}
			dropRange(d.Pos(), d.End())
			continue
		case *ast.GenDecl:
			var specs []ast.Spec
			for _, s := range d.Specs {
				remove := false
				switch s := s.(type) {
				case *ast.ValueSpec:
					if d.Tok == token.CONST {
						if _, _, ok := aliasSpec(s, r.act); ok {
							remove = true
						}
					}
				case *ast.TypeSpec:
					if sy, ok := own[s.Name.Name]; ok && sy.kind == kType {
						remove = true
					}
				}
				if !remove {
					specs = append(specs, s)
					continue
				}
				r.dirty = true
				switch s := s.(type) {
				case *ast.ValueSpec:
					if s.Doc != nil {
						drop[s.Doc] = true
					}
					if s.Comment != nil {
						drop[s.Comment] = true
					}
				case *ast.TypeSpec:
					if s.Doc != nil {
						drop[s.Doc] = true
					}
					if s.Comment != nil {
						drop[s.Comment] = true
					}
				}
				dropRange(s.Pos(), s.End())
			}
			if len(specs) == 0 && len(d.Specs) > 0 {
				if d.Doc != nil {
					drop[d.Doc] = true
				}
				dropRange(d.Pos(), d.End())
				continue
			}
			d.Specs = specs
		}
		decls = append(decls, d)
	}
	r.f.ast.Decls = decls
}

func recvType(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		e = s.X
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// loadActuationCodes reads the Code constants internal/actuation declares.
func (t *tree) loadActuationCodes() error {
	paths, err := filepath.Glob("internal/actuation/*.go")
	if err != nil {
		return err
	}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.CONST {
				for _, sp := range g.Specs {
					for _, n := range sp.(*ast.ValueSpec).Names {
						if strings.HasPrefix(n.Name, "Code") {
							t.actCodes[n.Name] = true
						}
					}
				}
			}
		}
	}
	return nil
}

// gone resolves a Code name a package no longer declares (its alias was
// removed by an earlier run) to the actuation constant of the same name.
func (r *fileRewriter) gone(key, name string) (sym, bool) {
	decl, walked := r.t.declared[key]
	if walked && strings.HasPrefix(name, "Code") && name != "CodeOf" && r.t.actCodes[name] && !decl[name] {
		return sym{kind: kAlias, code: name}, true
	}
	return sym{}, false
}

// lookup resolves an identifier or a qualified identifier to a symbol.
func (r *fileRewriter) lookup(e ast.Expr) (sym, bool) {
	switch e := e.(type) {
	case *ast.Ident:
		if s, ok := r.unqual[e.Name]; ok {
			return s, ok
		}
		return r.gone(r.f.dir+"|"+r.f.ast.Name.Name, e.Name)
	case *ast.SelectorExpr:
		x, ok := e.X.(*ast.Ident)
		if !ok {
			return sym{}, false
		}
		p, ok := r.imports[x.Name]
		if !ok {
			return sym{}, false
		}
		if s, ok := r.t.qual[p][e.Sel.Name]; ok {
			return s, ok
		}
		dir := strings.TrimPrefix(p, module+"/")
		return r.gone(dir+"|"+r.t.pkgNames[p], e.Sel.Name)
	}
	return sym{}, false
}

func (r *fileRewriter) sel(pos token.Pos, name string) *ast.SelectorExpr {
	return &ast.SelectorExpr{X: &ast.Ident{NamePos: pos, Name: r.act}, Sel: &ast.Ident{NamePos: pos, Name: name}}
}

func call(pos, end token.Pos, fun ast.Expr, args ...ast.Expr) *ast.CallExpr {
	rp := end
	if rp > pos {
		rp--
	}
	return &ast.CallExpr{Fun: fun, Lparen: pos, Args: args, Rparen: rp}
}

// stripString returns x when e is string(x) and x is known to be an
// actuation.Code (a Code constant or a CodeOf call).
func (r *fileRewriter) stripString(e ast.Expr) (ast.Expr, bool) {
	c, ok := e.(*ast.CallExpr)
	if !ok || len(c.Args) != 1 || !isIdent(c.Fun, "string") {
		return nil, false
	}
	if r.isCode(c.Args[0]) {
		return c.Args[0], true
	}
	return nil, false
}

// isCode reports whether e is an actuation Code constant or a CodeOf call.
func (r *fileRewriter) isCode(e ast.Expr) bool {
	if c, ok := e.(*ast.CallExpr); ok && len(c.Args) == 1 {
		s, ok := c.Fun.(*ast.SelectorExpr)
		return ok && isIdent(s.X, r.act) && s.Sel.Name == "CodeOf"
	}
	s, ok := e.(*ast.SelectorExpr)
	return ok && isIdent(s.X, r.act) && strings.HasPrefix(s.Sel.Name, "Code") && s.Sel.Name != "CodeOf"
}

// codeExpr turns a string-typed code expression into an actuation.Code one.
func (r *fileRewriter) codeExpr(e ast.Expr) ast.Expr {
	if x, ok := r.stripString(e); ok {
		return x
	}
	if r.isCode(e) {
		return e
	}
	if c, ok := e.(*ast.CallExpr); ok && len(c.Args) == 1 {
		if s, ok := c.Fun.(*ast.SelectorExpr); ok && isIdent(s.X, r.act) && s.Sel.Name == "Code" {
			return e
		}
	}
	return call(e.Pos(), e.End(), r.sel(e.Pos(), "Code"), e)
}

// expr is applied bottom-up to every expression of the file.
func (r *fileRewriter) expr(e ast.Expr) ast.Expr {
	switch n := e.(type) {
	case *ast.Ident, *ast.SelectorExpr:
		s, ok := r.lookup(n)
		if !ok {
			return e
		}
		switch s.kind {
		case kAlias:
			r.dirty = true
			return call(e.Pos(), e.End(), &ast.Ident{NamePos: e.Pos(), Name: "string"}, r.sel(e.Pos(), s.code))
		case kType:
			r.dirty = true
			return r.sel(e.Pos(), "Refusal")
		}
	case *ast.CallExpr:
		s, ok := r.lookup(n.Fun)
		if ok {
			pos, end := n.Pos(), n.End()
			switch {
			case s.kind == kNew && len(n.Args) >= 2:
				r.dirty = true
				args := append([]ast.Expr{r.codeExpr(n.Args[0])}, n.Args[1:]...)
				c := call(pos, end, r.sel(pos, "Refusef"), args...)
				c.Ellipsis = n.Ellipsis
				return c
			case s.kind == kWrap && len(n.Args) >= 3:
				r.dirty = true
				args := append([]ast.Expr{r.codeExpr(n.Args[0])}, n.Args[1:]...)
				c := call(pos, end, r.sel(pos, "Wrapf"), args...)
				c.Ellipsis = n.Ellipsis
				return c
			case s.kind == kCodeOfString && len(n.Args) == 1:
				r.dirty = true
				return call(pos, end, &ast.Ident{NamePos: pos, Name: "string"}, call(pos, end, r.sel(pos, "CodeOf"), n.Args[0]))
			case s.kind == kCodeOfCode && len(n.Args) == 1:
				r.dirty = true
				return call(pos, end, r.sel(pos, "CodeOf"), n.Args[0])
			case s.kind == kIs && len(n.Args) == 2:
				r.dirty = true
				return &ast.ParenExpr{Lparen: pos, X: &ast.BinaryExpr{
					X:     call(pos, end, r.sel(pos, "CodeOf"), n.Args[0]),
					OpPos: pos, Op: token.EQL,
					Y: r.codeExpr(n.Args[1]),
				}, Rparen: end}
			}
		}
		// actuation.Code(string(x)) -> x, when x is already a Code
		if f, ok := n.Fun.(*ast.SelectorExpr); ok && isIdent(f.X, r.act) && f.Sel.Name == "Code" && len(n.Args) == 1 {
			if c, ok := r.stripString(n.Args[0]); ok {
				r.dirty = true
				return c
			}
		}
	case *ast.BinaryExpr:
		// string(code) == string(code) -> code == code
		if n.Op == token.EQL || n.Op == token.NEQ {
			x, okx := r.stripString(n.X)
			y, oky := r.stripString(n.Y)
			if okx && oky {
				r.dirty = true
				n.X, n.Y = x, y
			}
		}
	case *ast.CompositeLit:
		if s, ok := n.Type.(*ast.SelectorExpr); ok && isIdent(s.X, r.act) && s.Sel.Name == "Refusal" {
			for _, el := range n.Elts {
				kv, ok := el.(*ast.KeyValueExpr)
				if !ok {
					continue
				}
				switch {
				case isIdent(kv.Key, "Code"):
					if c := r.codeExpr(kv.Value); c != kv.Value {
						r.dirty = true
						kv.Value = c
					}
				case isIdent(kv.Key, "Err"):
					r.dirty = true
					kv.Key = &ast.Ident{NamePos: kv.Key.Pos(), Name: "Cause"}
				}
			}
		}
	}
	return e
}

var exprType = reflect.TypeFor[ast.Expr]()

// walk visits the node behind v (a pointer to an ast struct) bottom-up,
// replacing every field or slice element of static type ast.Expr by f(expr).
func walk(v reflect.Value, f func(ast.Expr) ast.Expr) {
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return
	}
	e := v.Elem()
	if e.Kind() != reflect.Struct {
		return
	}
	for i := range e.NumField() {
		field := e.Field(i)
		if !field.CanSet() {
			continue
		}
		walkField(field, f)
	}
}

func walkField(fv reflect.Value, f func(ast.Expr) ast.Expr) {
	switch fv.Kind() {
	case reflect.Interface:
		if fv.IsNil() {
			return
		}
		walk(fv.Elem(), f)
		if fv.Type() == exprType {
			if ex, ok := fv.Interface().(ast.Expr); ok {
				if nx := f(ex); nx != ex {
					fv.Set(reflect.ValueOf(nx))
				}
			}
		}
	case reflect.Pointer:
		if _, skip := fv.Interface().(*ast.CommentGroup); skip {
			return
		}
		walk(fv, f)
	case reflect.Slice:
		for j := range fv.Len() {
			walkField(fv.Index(j), f)
		}
	}
}

// usedNames lists the identifiers used as the X of a selector.
func usedNames(f *ast.File) map[string]bool {
	used := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if s, ok := n.(*ast.SelectorExpr); ok {
			if id, ok := s.X.(*ast.Ident); ok {
				used[id.Name] = true
			}
		}
		return true
	})
	return used
}

// dropUnusedImports removes module-internal and standard library imports no
// selector uses any more.
func (r *fileRewriter) dropUnusedImports(used map[string]bool) {
	unused := map[string]bool{}
	for name, p := range r.imports {
		if !used[name] {
			unused[p] = true
		}
	}
	if len(unused) == 0 {
		return
	}
	r.dirty = true
	for _, d := range r.f.ast.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.IMPORT {
			continue
		}
		specs := g.Specs[:0]
		for _, s := range g.Specs {
			is := s.(*ast.ImportSpec)
			p, _ := strconv.Unquote(is.Path.Value)
			if unused[p] && (is.Name == nil || (is.Name.Name != "_" && is.Name.Name != ".")) {
				continue
			}
			specs = append(specs, s)
		}
		g.Specs = specs
	}
	decls := r.f.ast.Decls[:0]
	for _, d := range r.f.ast.Decls {
		if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.IMPORT && len(g.Specs) == 0 {
			continue
		}
		decls = append(decls, d)
	}
	r.f.ast.Decls = decls
	var imps []*ast.ImportSpec
	for _, is := range r.f.ast.Imports {
		p, _ := strconv.Unquote(is.Path.Value)
		if !unused[p] {
			imps = append(imps, is)
		}
	}
	r.f.ast.Imports = imps
}

// addImport inserts an import of path into formatted source: into the group
// of module imports when there is one, else as a group of its own.
func addImport(src []byte, path string) []byte {
	lines := strings.Split(string(src), "\n")
	line := "\t" + strconv.Quote(path)
	start, end := -1, -1
	for i, l := range lines {
		if start < 0 && strings.HasPrefix(l, "import (") {
			start = i
			continue
		}
		if start >= 0 && l == ")" {
			end = i
			break
		}
	}
	var out []string
	switch {
	case start >= 0 && end > start:
		group := -1
		for i := start + 1; i < end; i++ {
			if strings.Contains(lines[i], "\""+module+"/") {
				group = i
				break
			}
		}
		if group >= 0 {
			out = append(append(append(out, lines[:group]...), line), lines[group:]...)
		} else {
			out = append(append(append(out, lines[:end]...), "", line), lines[end:]...)
		}
	default:
		// A single import line, or none: add a block after the package clause.
		for i, l := range lines {
			if strings.HasPrefix(l, "package ") {
				out = append(append(append(out, lines[:i+1]...), "", "import "+strconv.Quote(path)), lines[i+1:]...)
				break
			}
		}
	}
	return []byte(strings.Join(out, "\n"))
}

// importClass groups an import line: standard library, this module, others.
func importClass(line string) int {
	q := strings.Index(line, "\"")
	if q < 0 {
		return -1
	}
	p, err := strconv.Unquote(strings.TrimSpace(line[q:]))
	switch {
	case err != nil:
		return -1
	case strings.HasPrefix(p, module+"/"):
		return 2
	case !strings.Contains(strings.Split(p, "/")[0], "."):
		return 0
	}
	return 1
}

// tidyImports removes the blank line a deleted import leaves between two
// imports of the same group.
func tidyImports(src []byte) []byte {
	lines := strings.Split(string(src), "\n")
	out := make([]string, 0, len(lines))
	in := false
	for i, l := range lines {
		switch {
		case strings.HasPrefix(l, "import ("):
			in = true
		case in && l == ")":
			in = false
		case in && strings.TrimSpace(l) == "" && i+1 < len(lines) && len(out) > 0:
			prev, next := importClass(out[len(out)-1]), importClass(lines[i+1])
			if prev >= 0 && prev == next || strings.TrimSpace(lines[i+1]) == "" || lines[i+1] == ")" || strings.HasPrefix(out[len(out)-1], "import (") {
				continue
			}
		}
		out = append(out, l)
	}
	return []byte(strings.Join(out, "\n"))
}

// switchStmt turns `switch string(code) { case string(code): }` into a switch
// over codes when the tag and every case are codes.
func (r *fileRewriter) switchStmt(n ast.Node) bool {
	sw, ok := n.(*ast.SwitchStmt)
	if !ok || sw.Tag == nil {
		return true
	}
	tag, ok := r.stripString(sw.Tag)
	if !ok {
		return true
	}
	var cases [][]ast.Expr
	for _, st := range sw.Body.List {
		cc := st.(*ast.CaseClause)
		list := make([]ast.Expr, len(cc.List))
		for i, e := range cc.List {
			x, ok := r.stripString(e)
			if !ok {
				return true
			}
			list[i] = x
		}
		cases = append(cases, list)
	}
	r.dirty = true
	sw.Tag = tag
	for i, st := range sw.Body.List {
		st.(*ast.CaseClause).List = cases[i]
	}
	return true
}
