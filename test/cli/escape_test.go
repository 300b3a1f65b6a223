package cli

import (
	"context"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	wbv1 "sensorium.dev/workbench/api/v1alpha1"
)

// Hostile argv atoms: each would drive the operator's terminal if printed raw.
const (
	atomOSC52 = "\x1b]52;c;cHduZWQ=\x07" // OSC 52: write the operator's clipboard
	atomClear = "\x1b[2J"                // CSI: clear the screen
	atomC1CSI = "\u009b31m"              // 8-bit CSI (a UTF-8 encoded C1 control)
	atomDCS   = "\x1bP+q544e\x1b\\"      // DCS (XTGETTCAP) ended by ST
)

// printfFormat prints the four hostile atoms' bytes (octal escapes of printf), then "printed".
const printfFormat = `\033]52;c;cHduZWQ=\007\033[2J\302\23331m\033P+q544e\033\\printed\n`

// rawControl names the first raw control a printer let through ("" when none): ESC, BEL,
// a C1 control, or any other C0 control but newline and tab.
func rawControl(s string) string {
	for _, r := range s {
		if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) {
			return string(r)
		}
	}
	return ""
}

// TestHostileAtomsEscaped (issue 25 item 6): an agent's argv whose atoms past argv[0] carry
// terminal sequences (OSC 52, CSI, 8-bit CSI, DCS) is shown escaped, atom by atom, by
// `run`'s consent prompt, by `consent ls` (table and -o json), and the same bytes printed
// by a command come out of `events` escaped: no printer hands them to the operator's
// terminal.
func TestHostileAtomsEscaped(t *testing.T) {
	ns := namespace(t)
	gitProfile(t, ns)
	dir := gitRepo(t)
	environment(t, ns, "e", dir)

	argv := []string{"git", "log", atomOSC52, atomClear, atomC1CSI, atomDCS}
	escaped := []string{`"\x1b]52;c;cHduZWQ=\a"`, `"\x1b[2J"`, `"\u009b31m"`, `"\x1bP+q544e\x1b\\"`}
	agentRun := startKW(t, ns, agentUser, append([]string{"run", "-e", "e", "--"}, argv...)...)
	req := agentRun.waitConsent(t)
	prompt := agentRun.stderrText()
	if c := rawControl(prompt); c != "" {
		t.Errorf("run's consent prompt printed the raw control %q:\n%q", c, prompt)
	}
	for _, e := range escaped {
		if !strings.Contains(prompt, e) {
			t.Errorf("run's consent prompt must show the atom as %s:\n%s", e, prompt)
		}
	}

	r := kw(t, ns, operatorUser, "consent", "ls")
	if r.code != 0 || !strings.Contains(r.stdout, req) {
		t.Fatalf("consent ls: %s", r)
	}
	if c := rawControl(r.stdout); c != "" {
		t.Errorf("consent ls printed the raw control %q:\n%q", c, r.stdout)
	}
	for _, e := range escaped {
		if !strings.Contains(r.stdout, e) {
			t.Errorf("consent ls must show the atom as %s:\n%s", e, r.stdout)
		}
	}
	r = kw(t, ns, operatorUser, "consent", "ls", "-o", "json")
	if r.code != 0 {
		t.Fatalf("consent ls -o json: %s", r)
	}
	if c := rawControl(r.stdout); c != "" {
		t.Errorf("consent ls -o json printed the raw control %q", c)
	}
	if !strings.Contains(r.stdout, `\u009b31m`) {
		t.Errorf("consent ls -o json must escape the C1 control as \\u009b:\n%s", r.stdout)
	}
	if r := kw(t, ns, operatorUser, "consent", "deny", req); r.code != 0 {
		t.Fatalf("consent deny: %s", r)
	}
	agentRun.wait(t)

	if !subresourcesServed(t) {
		t.Log("the aggregated subresource API is not served here: the events printer is not exercised")
		return
	}
	// A command prints the same sequences into a session; `events` shows them escaped.
	ctx := context.Background()
	must(t, st.Env.Client.Create(ctx, &wbv1.CommandProfile{ObjectMeta: metav1.ObjectMeta{Name: "printf", Namespace: ns}, Spec: wbv1.CommandProfileSpec{
		Executable: "/usr/bin/printf", AllowedArgPrefixes: []string{`\033`}, AllowedRoots: []string{"repo"},
		Env:               wbv1.CommandEnvPolicy{Defaults: []wbv1.EnvVar{{Name: "LANG", Value: "C.UTF-8"}, {Name: "PATH", Value: "/usr/bin:/bin"}}},
		MaxTimeoutSeconds: 60, MaxOutputBytes: 1 << 20}}))
	must(t, st.Env.Client.Create(ctx, &wbv1.TerminalSession{ObjectMeta: metav1.ObjectMeta{Name: "log", Namespace: ns},
		Spec: wbv1.TerminalSessionSpec{EnvironmentRef: "e"}}))
	if r := kw(t, ns, agentUser, "run", "-e", "e", "-p", "printf", "--session", "log", "--", "/usr/bin/printf", printfFormat); r.code != 0 {
		t.Fatalf("run printf: %s", r)
	}
	r = kw(t, ns, operatorUser, "events", "log")
	if r.code != 0 || !strings.Contains(r.stdout, "printed") {
		t.Fatalf("events: %s", r)
	}
	if c := rawControl(r.stdout); c != "" {
		t.Errorf("events printed the raw control %q:\n%q", c, r.stdout)
	}
	if !strings.Contains(r.stdout, `\x1b]52;c;cHduZWQ=\a`) || !strings.Contains(r.stdout, `\u009b31m`) {
		t.Errorf("events must show the sequences escaped:\n%s", r.stdout)
	}
}
