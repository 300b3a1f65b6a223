// Command darwincheck type-checks this module's darwin/arm64 code on any host, against the
// real dependencies (github.com/Code-Hex/vz/v3 for the vfkit-system.v1 backend), without
// the macOS SDK or a C compiler.
//
// The packages and their files come from `go list -e -deps -json` under GOOS=darwin
// GOARCH=arm64 CGO_ENABLED=1 (module-aware; go list runs no cgo). Every package's GoFiles
// and CgoFiles are parsed and checked in dependency order with go/types and
// Config{FakeImportC: true} (references to C.* are accepted untyped), through an importer
// over the packages already checked that honours each package's ImportMap. Errors count
// only in this module's packages: the dependencies' own cgo code is not faithfully
// checkable with a fake "C" (vz yields one spurious conversion error), and it is not this
// project's to fix. A dependency without cgo files is checked faithfully, though: when
// one of those has a type error for darwin (github.com/containerd/cgroups, say), it does
// not build there, so importing it on darwin counts as one error of this module. Exit
// status 1 when any such error is found, 2 on a usage or go list failure.
//
// Usage: go run ./hack/darwincheck [packages] (default ./...)
package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// maxErrorsShown bounds what one package prints; the count is always exact.
const maxErrorsShown = 50

type listedPackage struct {
	ImportPath string
	Dir        string
	Name       string
	Standard   bool
	GoFiles    []string
	CgoFiles   []string
	Imports    []string
	ImportMap  map[string]string
	Module     *struct{ Path string }
	Error      *struct{ Err string }
	DepsErrors []*struct{ Err string }
}

func main() {
	flag.Usage = func() {
		fmt.Fprintf(flag.CommandLine.Output(), "usage: darwincheck [packages] (default ./...)\n")
	}
	flag.Parse()
	patterns := flag.Args()
	if len(patterns) == 0 {
		patterns = []string{"./..."}
	}
	n, err := run(patterns, os.Stdout)
	if err != nil {
		fmt.Fprintln(os.Stderr, "darwincheck:", err)
		os.Exit(2)
	}
	if n > 0 {
		fmt.Fprintf(os.Stderr, "darwincheck: %d type error(s) in this module's darwin/arm64 code or the pure-Go dependencies it imports\n", n)
		os.Exit(1)
	}
}

// run lists, parses and checks; it returns the number of errors in the main module's
// packages.
func run(patterns []string, out io.Writer) (int, error) {
	mainModule, err := goList("-m", "-f", "{{.Path}}")
	if err != nil {
		return 0, err
	}
	mod := strings.TrimSpace(string(mainModule))
	data, err := goList(append([]string{"-e", "-deps", "-json"}, patterns...)...)
	if err != nil {
		return 0, err
	}
	pkgs, err := decode(data)
	if err != nil {
		return 0, err
	}
	fset := token.NewFileSet()
	checked := map[string]*types.Package{}
	total, own, ownErrors, depErrors := 0, 0, 0, 0
	for _, p := range pkgs { // go list -deps prints dependencies before their dependents
		if p.ImportPath == "unsafe" {
			checked["unsafe"] = types.Unsafe
			continue
		}
		mine := p.Module != nil && p.Module.Path == mod
		if p.Error != nil && mine {
			fmt.Fprintf(out, "%s: %s\n", p.ImportPath, p.Error.Err)
			ownErrors++
			continue
		}
		var files []*ast.File
		for _, name := range append(append([]string{}, p.GoFiles...), p.CgoFiles...) {
			f, err := parser.ParseFile(fset, filepath.Join(p.Dir, name), nil, parser.SkipObjectResolution)
			if err != nil {
				if mine {
					fmt.Fprintln(out, err)
					ownErrors++
				}
				continue
			}
			files = append(files, f)
		}
		var errs []error
		conf := types.Config{
			FakeImportC: true,
			Importer:    mapImporter{checked: checked, importMap: p.ImportMap},
			Sizes:       types.SizesFor("gc", "arm64"),
			Error:       func(err error) { errs = append(errs, err) },
		}
		pkg, _ := conf.Check(p.ImportPath, fset, files, nil) // errors arrive through conf.Error
		checked[p.ImportPath] = pkg
		total++
		if !mine {
			if len(errs) > 0 && len(p.CgoFiles) == 0 {
				// A pure-Go dependency that does not type-check for darwin does not build
				// there either (no fake "C" is involved): importing it breaks the build.
				fmt.Fprintf(out, "%s (dependency, pure Go, %d errors): %v\n", p.ImportPath, len(errs), errs[0])
				depErrors++
			}
			continue
		}
		own++
		for i, e := range errs {
			if i < maxErrorsShown {
				fmt.Fprintln(out, e)
			}
		}
		if len(errs) > maxErrorsShown {
			fmt.Fprintf(out, "%s: %d more errors\n", p.ImportPath, len(errs)-maxErrorsShown)
		}
		ownErrors += len(errs)
	}
	if own == 0 {
		return 0, fmt.Errorf("no package of module %s among %v", mod, patterns)
	}
	fmt.Fprintf(out, "darwincheck: %d packages checked for darwin/arm64 (%d of %s), %d errors in %s, %d pure-Go dependencies that do not build for darwin\n",
		total, own, mod, ownErrors, mod, depErrors)
	return ownErrors + depErrors, nil
}

func goList(args ...string) ([]byte, error) {
	cmd := exec.Command("go", append([]string{"list"}, args...)...)
	cmd.Env = append(os.Environ(), "GOOS=darwin", "GOARCH=arm64", "CGO_ENABLED=1")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go list %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return out, nil
}

func decode(data []byte) ([]*listedPackage, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var pkgs []*listedPackage
	for {
		p := new(listedPackage)
		if err := dec.Decode(p); err != nil {
			if errors.Is(err, io.EOF) {
				return pkgs, nil
			}
			return nil, fmt.Errorf("decode go list output: %w", err)
		}
		pkgs = append(pkgs, p)
	}
}

// mapImporter resolves an import path through the importing package's ImportMap (vendored
// or replaced standard-library paths) to a package already checked.
type mapImporter struct {
	checked   map[string]*types.Package
	importMap map[string]string
}

func (m mapImporter) Import(path string) (*types.Package, error) {
	if p, ok := m.importMap[path]; ok {
		path = p
	}
	if pkg, ok := m.checked[path]; ok && pkg != nil {
		return pkg, nil
	}
	if path == "unsafe" {
		return types.Unsafe, nil
	}
	// Not in the listing (it should be: -deps lists every dependency first); fall back to
	// export data so one odd package does not hide the rest.
	return importer.Default().Import(path)
}
