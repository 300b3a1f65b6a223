package actuation

import (
	"encoding/json"
	"path"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestValidateRelativePathFieldAndSplit(t *testing.T) {
	if r := ValidateRelativePath("../x", true); r == nil || r.Field != "path" || r.Code != CodePathTraversal {
		t.Fatalf("want path-traversal on field path, got %v", r)
	}
	if got := SplitRelativePath("a/b/c"); strings.Join(got, "|") != "a|b|c" {
		t.Errorf("SplitRelativePath = %q", got)
	}
	if SplitRelativePath("") != nil {
		t.Error("SplitRelativePath(\"\") must be nil")
	}
}

func TestValidateRootName(t *testing.T) {
	for _, ok := range []string{"repo", "a", "repo-2", "0abc", strings.Repeat("a", 63)} {
		if r := ValidateRootName(ok); r != nil {
			t.Errorf("ValidateRootName(%q) = %v", ok, r)
		}
	}
	for _, bad := range []string{"", "Repo", "-repo", "repo-", "re_po", "a.b", "/home", strings.Repeat("a", 64), "répo"} {
		if r := ValidateRootName(bad); r == nil || r.Code != CodeProfileInvalid {
			t.Errorf("ValidateRootName(%q) = %v, want profile-invalid", bad, r)
		}
	}
}

// FuzzValidateRelativePath: an accepted path never has a ".." component,
// never starts with "/", is its own path.Clean form, and carries no
// character the rules refuse.
func FuzzValidateRelativePath(f *testing.F) {
	for _, v := range vectorsOfKind(f, "relative-path") {
		var in relativePathInput
		if err := json.Unmarshal(v.Input, &in); err != nil {
			f.Fatal(err)
		}
		f.Add(in.path(f), in.RequireFile)
	}
	f.Fuzz(func(t *testing.T, p string, requireFile bool) {
		r := ValidateRelativePath(p, requireFile)
		if r != nil {
			if !IsKnownCode(r.Code) {
				t.Fatalf("unknown code %q", r.Code)
			}
			return
		}
		if p == "" {
			if requireFile {
				t.Fatal("accepted an empty path where a file is required")
			}
			return
		}
		for _, c := range strings.Split(p, "/") {
			if c == ".." || c == "." || c == "" {
				t.Fatalf("accepted %q with component %q", p, c)
			}
			if len(c) > MaxPathComponentBytes {
				t.Fatalf("accepted a component of %d bytes", len(c))
			}
		}
		if strings.HasPrefix(p, "/") {
			t.Fatalf("accepted absolute %q", p)
		}
		if path.Clean(p) != p {
			t.Fatalf("accepted %q, whose clean form is %q", p, path.Clean(p))
		}
		if !utf8.ValidString(p) || strings.ContainsAny(p, "\\\x00") || len(p) > MaxPathBytes {
			t.Fatalf("accepted %q with a refused character or length", p)
		}
		for _, r := range p {
			if r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) {
				t.Fatalf("accepted control character U+%04X", r)
			}
		}
		if strings.Join(SplitRelativePath(p), "/") != p {
			t.Fatalf("split/join does not round-trip %q", p)
		}
	})
}

// vectorsOfKind returns the vectors of one golden file, for fuzz seeds.
func vectorsOfKind(t testing.TB, kind string) []vector {
	t.Helper()
	vf, ok := loadVectorFiles(t)[kind]
	if !ok {
		t.Fatalf("no %s vectors", kind)
	}
	return vf.Vectors
}
