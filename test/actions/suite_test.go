// Package actions exercises signed action catalogs (seed 002) through a real kube-apiserver
// with the real CRDs, webhook configurations and the manager's controllers: admission of
// catalogs and runs, signature authorization, signer scope, posture.
package actions

import (
	"testing"
	"time"

	"sensorium.dev/workbench/controllers"
	"sensorium.dev/workbench/internal/test/envtest"
	"sensorium.dev/workbench/internal/test/nodeagenttest"
	"sensorium.dev/workbench/internal/test/testkit"
)

var env *envtest.Env

func TestMain(m *testing.M) {
	envtest.Main(m, "actions", envtest.Options{Setup: nodeagenttest.ManagerSetupWith(controllers.Config{ConsentTimeoutSeconds: 10, BindingRecheck: 2 * time.Second})}, &env)
}

func namespace(t testing.TB) string { return env.Namespace(t, "wb-act-") }

var eventually = testkit.Eventually
