// Command sbom writes a CycloneDX SBOM (JSON) of a Debian root filesystem from its own
// dpkg database (var/lib/dpkg/status): one component per installed package, with a
// package URL (pkg:deb/debian/NAME@VERSION?arch=ARCH), its source package and its
// dependencies. The output is deterministic: the serial number is derived from the
// status file's digest and the timestamp is the build's SOURCE_DATE_EPOCH.
//
//	go run ./hack/guest-image/sbom -status rootfs/var/lib/dpkg/status -name NAME -version V -o sbom.cdx.json
package main

import (
	"bufio"
	"crypto/sha256"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	cdx "github.com/CycloneDX/cyclonedx-go"
)

// Bounds on the input: a dpkg status file of a system image is a few MB.
const (
	maxStatusBytes = 64 << 20
	maxPackages    = 20000
)

// Package is one installed package of a dpkg status file.
type Package struct {
	Name, Version, Architecture, Source, Status string
	Depends                                     []string
}

// ParseStatus reads a dpkg status file and returns its installed packages sorted by name.
func ParseStatus(r io.Reader) ([]Package, error) {
	sc := bufio.NewScanner(io.LimitReader(r, maxStatusBytes+1))
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	var out []Package
	var cur Package
	var last string
	read := 0
	flush := func() error {
		if cur.Name != "" && strings.HasSuffix(cur.Status, " installed") {
			if len(out) >= maxPackages {
				return fmt.Errorf("more than %d packages", maxPackages)
			}
			out = append(out, cur)
		}
		cur, last = Package{}, ""
		return nil
	}
	for sc.Scan() {
		line := sc.Text()
		read += len(line) + 1
		if read > maxStatusBytes {
			return nil, fmt.Errorf("status file larger than %d bytes", maxStatusBytes)
		}
		if line == "" {
			if err := flush(); err != nil {
				return nil, err
			}
			continue
		}
		if line[0] == ' ' || line[0] == '\t' {
			continue // continuation (Description, Conffiles)
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fmt.Errorf("malformed line %q", line)
		}
		v = strings.TrimSpace(v)
		last = k
		switch k {
		case "Package":
			cur.Name = v
		case "Version":
			cur.Version = v
		case "Architecture":
			cur.Architecture = v
		case "Source":
			cur.Source = v
		case "Status":
			cur.Status = v
		case "Depends", "Pre-Depends":
			for _, d := range strings.Split(v, ",") {
				// The first alternative's name; version constraints and arch qualifiers dropped.
				d = strings.TrimSpace(strings.Split(d, "|")[0])
				d = strings.Fields(d + " ")[0]
				d, _, _ = strings.Cut(d, ":")
				if d != "" {
					cur.Depends = append(cur.Depends, d)
				}
			}
		}
		_ = last
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if len(out) == 0 {
		return nil, errors.New("no installed package in the status file")
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func purl(p Package) string {
	return fmt.Sprintf("pkg:deb/debian/%s@%s?arch=%s", p.Name, strings.ReplaceAll(p.Version, ":", "%3A"), p.Architecture)
}

// BOM builds the CycloneDX document for pkgs; statusDigest seeds the serial number.
func BOM(pkgs []Package, name, version string, epoch int64, statusDigest [32]byte) *cdx.BOM {
	bom := cdx.NewBOM()
	u := statusDigest[:16]
	u[6] = (u[6] & 0x0f) | 0x50 // name-based (SHA) UUID
	u[8] = (u[8] & 0x3f) | 0x80
	bom.SerialNumber = fmt.Sprintf("urn:uuid:%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
	bom.Metadata = &cdx.Metadata{
		Timestamp: time.Unix(epoch, 0).UTC().Format(time.RFC3339),
		Component: &cdx.Component{Type: cdx.ComponentTypeOS, Name: name, Version: version, BOMRef: "image"},
		Tools: &cdx.ToolsChoice{Components: &[]cdx.Component{{
			Type: cdx.ComponentTypeApplication, Name: "workbench hack/guest-image/sbom",
		}}},
	}
	installed := make(map[string]string, len(pkgs))
	for _, p := range pkgs {
		installed[p.Name] = purl(p)
	}
	comps := make([]cdx.Component, 0, len(pkgs))
	deps := []cdx.Dependency{{Ref: "image", Dependencies: &[]string{}}}
	top := []string{}
	for _, p := range pkgs {
		ref := purl(p)
		c := cdx.Component{Type: cdx.ComponentTypeLibrary, Name: p.Name, Version: p.Version, PackageURL: ref, BOMRef: ref}
		if p.Source != "" {
			c.Properties = &[]cdx.Property{{Name: "debian:source", Value: p.Source}}
		}
		comps = append(comps, c)
		top = append(top, ref)
		var ds []string
		seen := map[string]bool{}
		for _, d := range p.Depends {
			if r, ok := installed[d]; ok && !seen[r] {
				seen[r] = true
				ds = append(ds, r)
			}
		}
		sort.Strings(ds)
		deps = append(deps, cdx.Dependency{Ref: ref, Dependencies: &ds})
	}
	deps[0].Dependencies = &top
	bom.Components = &comps
	bom.Dependencies = &deps
	return bom
}

func main() {
	status := flag.String("status", "", "dpkg status file of the image")
	name := flag.String("name", "workbench-guest", "image name")
	version := flag.String("version", "", "image version (its rootfs digest)")
	epoch := flag.Int64("epoch", 0, "SOURCE_DATE_EPOCH")
	out := flag.String("o", "-", "output file")
	flag.Parse()
	if err := run(*status, *name, *version, *epoch, *out); err != nil {
		fmt.Fprintf(os.Stderr, "sbom: %v\n", err)
		os.Exit(1)
	}
}

func run(status, name, version string, epoch int64, out string) error {
	data, err := os.ReadFile(status)
	if err != nil {
		return err
	}
	pkgs, err := ParseStatus(strings.NewReader(string(data)))
	if err != nil {
		return err
	}
	bom := BOM(pkgs, name, version, epoch, sha256.Sum256(data))
	w := io.Writer(os.Stdout)
	if out != "-" {
		f, err := os.Create(out)
		if err != nil {
			return err
		}
		defer func() { _ = f.Close() }()
		w = f
	}
	return cdx.NewBOMEncoder(w, cdx.BOMFileFormatJSON).SetPretty(true).Encode(bom)
}
