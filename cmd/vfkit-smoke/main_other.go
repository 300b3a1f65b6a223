//go:build !darwin

// Command vfkit-smoke boots one vfkit-system.v1 guest on a Mac (main_darwin.go); on other
// systems it only says so.
package main

import (
	"fmt"
	"os"
)

func main() {
	fmt.Fprintln(os.Stderr, "vfkit-smoke: vfkit-system.v1 runs on macOS (Apple silicon) only")
	os.Exit(2)
}
