// Command kubectl-workbench is the Sensorium Workbench kubectl plugin (`kubectl workbench`).
package main

import (
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"sensorium.dev/workbench/internal/cli"
)

func main() {
	os.Exit(cli.Main(os.Args[1:], genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr}))
}
