package main

import (
	"crypto/sha256"
	"strings"
	"testing"
)

const status = `Package: a
Status: install ok installed
Version: 1:2.0-1
Architecture: amd64
Source: a-src
Depends: b (>= 1) | c, libc6:any, missing
Description: x
 continuation line

Package: b
Status: install ok installed
Version: 1
Architecture: all

Package: gone
Status: deinstall ok config-files
Version: 1
Architecture: amd64
`

func TestSBOMFromDpkgStatus(t *testing.T) {
	pkgs, err := ParseStatus(strings.NewReader(status))
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 2 || pkgs[0].Name != "a" || pkgs[1].Name != "b" {
		t.Fatalf("installed packages: %+v", pkgs)
	}
	bom := BOM(pkgs, "img", "sha256:x", 0, sha256.Sum256([]byte(status)))
	comps := *bom.Components
	if comps[0].PackageURL != "pkg:deb/debian/a@1%3A2.0-1?arch=amd64" || comps[0].Version != "1:2.0-1" {
		t.Fatalf("component a: %+v", comps[0])
	}
	deps := *bom.Dependencies
	// a depends on b (installed); c, libc6 and missing are not installed: no edges to them.
	if len(deps) != 3 || len(*deps[1].Dependencies) != 1 || (*deps[1].Dependencies)[0] != comps[1].BOMRef {
		t.Fatalf("dependencies: %+v", deps)
	}
	again := BOM(pkgs, "img", "sha256:x", 0, sha256.Sum256([]byte(status)))
	if again.SerialNumber != bom.SerialNumber || bom.Metadata.Timestamp != "1970-01-01T00:00:00Z" {
		t.Fatal("the SBOM is not deterministic")
	}
}

func TestParseStatusRefusesEmptyAndMalformed(t *testing.T) {
	if _, err := ParseStatus(strings.NewReader("")); err == nil {
		t.Fatal("an empty database")
	}
	if _, err := ParseStatus(strings.NewReader("no colon here\n")); err == nil {
		t.Fatal("a malformed line")
	}
}
