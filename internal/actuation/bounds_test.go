package actuation_test

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	protocol "sensorium.dev/workbench/guest/protocol/v1"
	"sensorium.dev/workbench/internal/actuation"
	"sensorium.dev/workbench/internal/platform/procexec"
)

// TestBoundsTableMatchesEveryLayer: the size bounds of a command come from one table
// (actuation.Bounds). Every layer that bounds the same thing — the generated CRD schema of
// TerminalCommand (read from config/crd/bases, what the API server enforces before any
// webhook), the node's process runner (procexec) and the guest protocol — must hold the
// same number: a layer below admission that is tighter refuses what admission accepted, a
// looser one is a bound nobody tested. Change a marker, a runner cap or a protocol cap
// without the table and this fails.
func TestBoundsTableMatchesEveryLayer(t *testing.T) {
	table := map[string]int64{}
	for _, b := range actuation.Bounds() {
		if b.Max <= 0 || b.Code == "" {
			t.Errorf("bound %s: max %d code %q", b.Name, b.Max, b.Code)
		}
		table[b.Name] = b.Max
	}
	spec := crdSpec(t, "workbench.sensorium.dev_terminalcommands.yaml")
	argv := field(t, spec, "argv")
	env := field(t, spec, "env")
	envItem := field(t, env, "items")
	checks := []struct {
		layer, bound string
		got          int64
	}{
		{"CRD spec.argv maxItems", "argv-atoms", num(t, argv, "maxItems")},
		{"CRD spec.argv items maxLength", "argv-atom-bytes", num(t, field(t, argv, "items"), "maxLength")},
		{"CRD spec.env maxItems", "env-overrides", num(t, env, "maxItems")},
		{"CRD spec.env[*].name maxLength", "env-key-bytes", num(t, field(t, field(t, envItem, "properties"), "name"), "maxLength")},
		{"CRD spec.timeoutSeconds rule", "timeout-seconds", ruleMax(t, field(t, spec, "timeoutSeconds"))},
		{"CRD spec.outputBytes rule", "output-bytes", ruleMax(t, field(t, spec, "outputBytes"))},
		{"procexec.MaxArgs", "argv-atoms", procexec.MaxArgs},
		{"procexec.MaxArgBytes (atoms and their NULs)", "argv-total-bytes", procexec.MaxArgBytes - procexec.MaxArgs},
		{"procexec.MaxEnvVars", "process-env-vars", procexec.MaxEnvVars},
		{"procexec.MaxEnvBytes", "process-env-bytes", procexec.MaxEnvBytes},
		{"procexec.MaxOutputBytes", "output-bytes", procexec.MaxOutputBytes},
		{"guest protocol MaxArgs", "argv-atoms", protocol.MaxArgs},
		{"guest protocol MaxEnv", "process-env-vars", protocol.MaxEnv},
		{"guest protocol MaxOutputBytes", "output-bytes", protocol.MaxOutputBytes},
	}
	for _, c := range checks {
		want, ok := table[c.bound]
		if !ok {
			t.Errorf("%s: no bound %q in actuation.Bounds()", c.layer, c.bound)
			continue
		}
		if c.got != want {
			t.Errorf("%s = %d, the table's %s is %d: the layers drifted", c.layer, c.got, c.bound, want)
		}
	}
	// The env value bound is a CEL-free maxLength too, when the CRD carries one: it may not
	// be below the table's (a value admission accepts must fit).
	if v, ok := field(t, field(t, envItem, "properties"), "value")["maxLength"]; ok {
		if got := int64(v.(float64)); got < table["env-value-bytes"] {
			t.Errorf("CRD spec.env[*].value maxLength %d below the table's %d", got, table["env-value-bytes"])
		}
	}
	// What a command can carry fits what the runner takes: the profile's defaults and the
	// admitted overrides leave room for what the node adds.
	if actuation.MaxEnvDefaults+actuation.MaxEnvOverrides >= actuation.MaxProcessEnvVars {
		t.Errorf("defaults %d + overrides %d leave no room below the process's %d entries", actuation.MaxEnvDefaults, actuation.MaxEnvOverrides, actuation.MaxProcessEnvVars)
	}
}

func crdSpec(t *testing.T, file string) map[string]any {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "config", "crd", "bases", file))
	if err != nil {
		t.Fatal(err)
	}
	var crd map[string]any
	if err := yaml.Unmarshal(b, &crd); err != nil {
		t.Fatal(err)
	}
	versions := field(t, crd, "spec")["versions"].([]any)
	v := versions[0].(map[string]any)
	return field(t, field(t, field(t, field(t, field(t, v, "schema"), "openAPIV3Schema"), "properties"), "spec"), "properties")
}

func field(t *testing.T, m map[string]any, k string) map[string]any {
	t.Helper()
	v, ok := m[k].(map[string]any)
	if !ok {
		t.Fatalf("no object %q in the CRD schema (have %v)", k, keys(m))
	}
	return v
}

func keys(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func num(t *testing.T, m map[string]any, k string) int64 {
	t.Helper()
	v, ok := m[k].(float64)
	if !ok {
		t.Fatalf("no number %q in the CRD schema (have %v)", k, keys(m))
	}
	return int64(v)
}

// ruleMax reads N from the field's "self <= N" CEL rule.
func ruleMax(t *testing.T, m map[string]any) int64 {
	t.Helper()
	rules, _ := m["x-kubernetes-validations"].([]any)
	for _, r := range rules {
		rule, _ := r.(map[string]any)["rule"].(string)
		if n, ok := strings.CutPrefix(rule, "self <= "); ok {
			v, err := strconv.ParseInt(strings.TrimSpace(n), 10, 64)
			if err != nil {
				t.Fatalf("rule %q: %v", rule, err)
			}
			return v
		}
	}
	t.Fatalf("no 'self <= N' rule in %v", rules)
	return 0
}

// TestOrDefault: zero and negative caps ask for the default, a positive one stands.
func TestOrDefault(t *testing.T) {
	for _, c := range []struct{ v, def, want int64 }{
		{0, 7, 7}, {-1, 7, 7}, {-1 << 62, 7, 7}, {1, 7, 1}, {9, 7, 9}, {1 << 62, 7, 1 << 62},
	} {
		if got := actuation.OrDefault(c.v, c.def); got != c.want {
			t.Errorf("OrDefault(%d, %d) = %d, want %d", c.v, c.def, got, c.want)
		}
	}
	if got := actuation.OrDefault(0, 3); got != 3 { // int
		t.Errorf("OrDefault(0, 3) = %d", got)
	}
}
