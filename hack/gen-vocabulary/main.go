// Command gen-vocabulary rewrites the generated refusal-code section of
// docs/vocabulary.md from internal/actuation (run by `make vocabulary` and by
// `go generate ./internal/actuation`).
package main

import (
	"flag"
	"fmt"
	"os"

	"sensorium.dev/workbench/internal/actuation/vocabdoc"
)

func main() {
	dir := flag.String("actuation", ".", "the internal/actuation directory")
	doc := flag.String("doc", "../../docs/vocabulary.md", "the vocabulary document to rewrite")
	flag.Parse()
	out, err := vocabdoc.Generate(*dir, *doc)
	if err != nil {
		fmt.Fprintf(os.Stderr, "gen-vocabulary: %v\n", err)
		os.Exit(1)
	}
	if err := os.WriteFile(*doc, out, 0o644); err != nil {
		fmt.Fprintf(os.Stderr, "gen-vocabulary: %v\n", err)
		os.Exit(1)
	}
}
