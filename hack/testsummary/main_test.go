package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestTimedOutTestIsNamed runs a real `go test -json` whose test outlives -timeout and
// checks that the summary names the test that was running and shows the timeout panic,
// instead of a package that failed with every counted test passed.
func TestTimedOutTestIsNamed(t *testing.T) {
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skip("go is not on PATH: cannot run a real go test -json")
	}
	dir := t.TempDir()
	write := func(name, body string) {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.test/hang\n\ngo 1.22\n")
	write("hang_test.go", `package hang

import (
	"testing"
	"time"
)

func TestQuick(t *testing.T) {}

func TestHangs(t *testing.T) {
	t.Log("waiting for the guest")
	time.Sleep(time.Minute)
}
`)
	cmd := exec.Command(gobin, "test", "-json", "-count=1", "-timeout", "3s", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GOFLAGS=", "GOWORK=off")
	raw, _ := cmd.Output() // the package fails: that is the point
	var out bytes.Buffer
	if code := summarize(bytes.NewReader(raw), &out, nil); code != 1 {
		t.Fatalf("exit code %d, want 1; summary:\n%s", code, out.String())
	}
	s := out.String()
	for _, want := range []string{
		"--- UNFINISHED: example.test/hang TestHangs",
		"waiting for the guest",
		"test timed out after 3s",
	} {
		if !strings.Contains(s, want) {
			t.Errorf("summary lacks %q:\n%s", want, s)
		}
	}
	if strings.Contains(s, "UNFINISHED: example.test/hang TestQuick") {
		t.Errorf("a passed test is reported unfinished:\n%s", s)
	}
}
