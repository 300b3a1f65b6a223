package agent

import (
	"os"
	"testing"

	"sensorium.dev/workbench/internal/platform/procexec"
)

func TestMain(m *testing.M) {
	procexec.MaybeRunHelper() // gitexec's test starts real sandboxed processes
	os.Exit(m.Run())
}
