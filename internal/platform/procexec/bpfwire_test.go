package procexec

import (
	"encoding/json"
	"slices"
	"testing"

	"sensorium.dev/workbench/internal/platform/procexec/sandboxhelper"
)

// TestBPFProgramRoundTrip: the sandbox's seccomp filter reaches the helper's configuration
// instruction for instruction, and a truncated or oversized program is refused.
func TestBPFProgramRoundTrip(t *testing.T) {
	prog, err := seccompProgram()
	if err != nil {
		t.Skipf("no seccomp program on this machine: %v", err)
	}
	raw, err := json.Marshal(helperConfig{Seccomp: prog})
	if err != nil {
		t.Fatal(err)
	}
	var back helperConfig
	if err := json.Unmarshal(raw, &back); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(back.Seccomp, bpfProgram(prog)) {
		t.Fatalf("program changed on the way: %d instructions in, %d out", len(prog), len(back.Seccomp))
	}
	for _, bad := range []string{`"AAAA"`, `"` + string(make([]byte, 0)) + `!!"`, `[1,2]`} {
		var p bpfProgram
		if err := json.Unmarshal([]byte(bad), &p); err == nil {
			t.Errorf("%s decoded without error to %d instructions", bad, len(p))
		}
	}
	big := make(bpfProgram, sandboxhelper.MaxBPFInsns+1)
	raw, _ = json.Marshal(big)
	var p bpfProgram
	if err := json.Unmarshal(raw, &p); err == nil {
		t.Errorf("a program of %d instructions decoded", len(big))
	}
}
