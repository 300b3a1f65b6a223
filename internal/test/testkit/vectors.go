package testkit

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"runtime"
	"testing"
)

// PathVector is one golden relative-path vector (test/vectors/relative-path.json): the
// path (decoded when the vector gives it in base64), whether it must name a file, and the
// refusal code expected ("" when the path is accepted).
type PathVector struct {
	Name        string
	Path        string
	RequireFile bool
	Code        string
}

// RelativePathVectors reads the repository's golden relative-path vectors, which the
// actuation core, the host's file access and the guest protocol all run; it fails the test
// when they cannot be read or hold fewer than ten vectors.
func RelativePathVectors(t testing.TB) []PathVector {
	t.Helper()
	_, file, _, _ := runtime.Caller(0)
	raw, err := os.ReadFile(filepath.Join(filepath.Dir(file), "..", "..", "..", "test", "vectors", "relative-path.json"))
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Vectors []struct {
			Name  string `json:"name"`
			Input struct {
				RequireFile bool   `json:"requireFile"`
				Path        string `json:"path"`
				PathBase64  string `json:"pathBase64"`
			} `json:"input"`
			Expect struct {
				OK   bool   `json:"ok"`
				Code string `json:"code"`
			} `json:"expect"`
		} `json:"vectors"`
	}
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	if len(doc.Vectors) < 10 {
		t.Fatalf("only %d relative-path vectors", len(doc.Vectors))
	}
	out := make([]PathVector, 0, len(doc.Vectors))
	for _, v := range doc.Vectors {
		pv := PathVector{Name: v.Name, Path: v.Input.Path, RequireFile: v.Input.RequireFile, Code: v.Expect.Code}
		if v.Input.PathBase64 != "" {
			b, err := base64.StdEncoding.DecodeString(v.Input.PathBase64)
			if err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
			pv.Path = string(b)
		}
		if v.Expect.OK {
			pv.Code = ""
		}
		out = append(out, pv)
	}
	return out
}
