package envtest

import (
	"errors"
	"fmt"
	"os"
	"testing"
)

// Main is the whole TestMain of a suite that needs only the control plane (and the manager
// opts.Setup registers): it starts it, stores it in *env, runs the tests, stops it and
// exits. Without KUBEBUILDER_ASSETS the suite is skipped, saying so.
func Main(m *testing.M, suite string, opts Options, env **Env) {
	e, err := Start(opts)
	if errors.Is(err, ErrNoAssets) {
		fmt.Fprintf(os.Stderr, "SKIP %s suite: %v\n", suite, err)
		os.Exit(0)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s suite: starting control plane: %v\n", suite, err)
		os.Exit(1)
	}
	*env = e
	code := m.Run()
	e.Stop()
	os.Exit(code)
}
