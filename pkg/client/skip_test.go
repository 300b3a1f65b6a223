package client

import (
	"bytes"
	"testing"
)

// A re-read from the first byte passes on only what the writer has not had.
func TestSkipWriter(t *testing.T) {
	var out bytes.Buffer
	sw := &skipWriter{w: &out}
	for _, pass := range [][]string{{"hel"}, {"he", "llo "}, {"hello wo", "rld"}} {
		sw.seen = 0
		for _, chunk := range pass {
			if n, err := sw.Write([]byte(chunk)); err != nil || n != len(chunk) {
				t.Fatalf("Write(%q) = %d, %v", chunk, n, err)
			}
		}
	}
	if out.String() != "hello world" {
		t.Fatalf("got %q", out.String())
	}
}
