package fsaccess

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"sensorium.dev/workbench/internal/actuation"
)

// TestSharedRelativePathVectors runs the repository's golden path vectors
// (shared with internal/actuation) against CheckRel, so the lexical pre-check
// here refuses with the same code as the actuation core.
func TestSharedRelativePathVectors(t *testing.T) {
	p := filepath.Join("..", "..", "..", "test", "vectors", "relative-path.json")
	raw, err := os.ReadFile(p)
	if err != nil {
		t.Skipf("golden vectors %s not readable: %v", p, err)
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
	if len(doc.Vectors) == 0 {
		t.Fatal("no vectors")
	}
	for _, v := range doc.Vectors {
		path := v.Input.Path
		if v.Input.PathBase64 != "" {
			b, err := base64.StdEncoding.DecodeString(v.Input.PathBase64)
			if err != nil {
				t.Fatalf("%s: %v", v.Name, err)
			}
			path = string(b)
		}
		got := string(actuation.CodeOf(CheckRel(path, v.Input.RequireFile)))
		want := v.Expect.Code
		if v.Expect.OK {
			want = ""
		}
		if got != want {
			t.Errorf("%s: CheckRel(%q, %v) = %q, want %q", v.Name, path, v.Input.RequireFile, got, want)
		}
	}
}
