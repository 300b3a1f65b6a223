package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"sensorium.dev/workbench/internal/test/testkit"
)

func TestReproducibleNewc(t *testing.T) {
	dir := t.TempDir()
	src := filepath.Join(dir, "agent")
	must(t, os.WriteFile(src, []byte("#!/bin/sh\n"), 0o755))
	// Entries in reverse order: the output is sorted regardless.
	spec := filepath.Join(dir, "spec")
	must(t, os.WriteFile(spec, []byte("file /init "+src+" 0755\nslink /bin/sh busybox 0777\nnod /dev/console 0600 c 5 1\ndir /dev 0755\ndir /bin 0755 # comment\n"), 0o644))
	var outs [][]byte
	for i := 0; i < 2; i++ {
		out := filepath.Join(dir, "out")
		if err := run(spec, out, 0, false); err != nil {
			t.Fatal(err)
		}
		b, _ := os.ReadFile(out)
		outs = append(outs, b)
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("two builds differ")
	}
	b := outs[0]
	if !bytes.HasPrefix(b, []byte("070701")) || len(b)%4 != 0 || !bytes.Contains(b, []byte("TRAILER!!!\x00")) {
		t.Fatal("not a newc archive")
	}
	// Sorted: bin < bin/sh < dev < dev/console < init.
	order := []string{"bin\x00", "bin/sh\x00", "dev\x00", "dev/console\x00", "init\x00"}
	last := -1
	for _, n := range order {
		i := bytes.Index(b, []byte(n))
		if i <= last {
			t.Fatalf("%q out of order", n)
		}
		last = i
	}
	must(t, os.WriteFile(spec, []byte("file /x "+src+" 0755\nfile /x "+src+" 0755\n"), 0o644))
	if err := run(spec, filepath.Join(dir, "dup"), 0, false); err == nil {
		t.Fatal("duplicate names accepted")
	}
}

var must = testkit.Must
