package actuation

import (
	"encoding/json"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func TestEnvKeyClasses(t *testing.T) {
	cases := map[string]string{
		"LD_PRELOAD": EnvClassLoader, "glibc_tunables": EnvClassLoader,
		"BASH_ENV": EnvClassInterpreter, "PYTHONPATH": EnvClassInterpreter, "GIT_SSH_COMMAND": EnvClassInterpreter, "GIT_CONFIG_KEY_0": EnvClassInterpreter,
		"SSH_AUTH_SOCK": EnvClassAgentSocket, "WAYLAND_DISPLAY": EnvClassAgentSocket,
		"GITHUB_TOKEN": EnvClassCredential, "AWS_PROFILE": EnvClassCredential, "NPM_CONFIG__AUTH": EnvClassCredential, "X_AUTH": EnvClassCredential,
		"HTTPS_PROXY": EnvClassEgress, "no_proxy": EnvClassEgress,
		"PATH": "", "GIT_AUTHOR_NAME": "", "AUTHOR": "", "KEYMAP": "", "PYTHONUNBUFFERED": "",
	}
	for k, want := range cases {
		if got := EnvKeyClass(k); got != want {
			t.Errorf("EnvKeyClass(%q) = %q, want %q", k, got, want)
		}
	}
	if r := ValidateEnvKey("HTTPS_PROXY"); r == nil || r.Code != CodeEgressForbidden {
		t.Errorf("proxy key: %v, want egress-forbidden", r)
	}
}

func TestEnvRulesAreUpperCaseData(t *testing.T) {
	for _, r := range forbiddenEnvRules {
		if r.pattern != strings.ToUpper(r.pattern) || r.pattern == "" {
			t.Errorf("rule pattern %q must be non-empty upper case", r.pattern)
		}
		if r.code != CodeEnvKeyForbidden && r.code != CodeEgressForbidden {
			t.Errorf("rule %q has code %s", r.pattern, r.code)
		}
		// Every exact and prefix pattern is itself refused.
		if r.match == envExact || r.match == envPrefix {
			key := r.pattern
			if r.match == envPrefix {
				key += "X"
			}
			if ValidateEnvKey(key) == nil || ValidateEnvKey(strings.ToLower(key)) == nil {
				t.Errorf("key %q (and its lower case) must be refused", key)
			}
		}
	}
}

func TestValidateEnvVarFields(t *testing.T) {
	rs := ValidateEnvVar(EnvVar{Name: "LD_PRELOAD", Value: "a\x00"})
	if got := codes(rs); !slices.Equal(got, []Code{CodeEnvKeyForbidden, CodeEnvValueInvalid}) {
		t.Fatalf("codes = %v", got)
	}
	if rs[0].Field != "name" || rs[1].Field != "value" {
		t.Errorf("fields = %q, %q", rs[0].Field, rs[1].Field)
	}
	if rs := ValidateEnvVar(EnvVar{Name: "X", Value: "\xff"}); len(rs) != 1 || rs[0].Code != CodeEnvValueInvalid {
		t.Errorf("invalid UTF-8 value: %v", rs)
	}
}

func TestCuratedEnvNeverInherits(t *testing.T) {
	t.Setenv("WORKBENCH_HOST_ONLY", "leak")
	p := goTestProfile()
	env, r := CuratedEnv(p, nil)
	if r != nil {
		t.Fatal(r)
	}
	want := []EnvVar{{Name: "HOME", Value: "/tmp/home"}, {Name: "PATH", Value: "/usr/bin:/bin"}}
	if !slices.Equal(env, want) {
		t.Fatalf("env = %v, want %v", env, want)
	}
	p.Env.Defaults = append(p.Env.Defaults, EnvVar{Name: "LD_PRELOAD", Value: "x"})
	if _, r := CuratedEnv(p, nil); r == nil || r.Code != CodeEnvKeyForbidden {
		t.Fatalf("forbidden default: %v", r)
	}
}

var envKeySyntax = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// forbiddenByTable re-reads the forbidden tables without matchForbiddenEnv.
func forbiddenByTable(key string) bool {
	k := strings.ToUpper(key)
	if narrowingEnvKeys[k] {
		return false
	}
	for _, r := range forbiddenEnvRules {
		switch r.match {
		case envExact:
			if k == r.pattern {
				return true
			}
		case envPrefix:
			if len(k) >= len(r.pattern) && k[:len(r.pattern)] == r.pattern {
				return true
			}
		case envContains:
			if strings.Contains(k, r.pattern) {
				return true
			}
		case envSegment:
			for _, s := range strings.FieldsFunc(k, func(c rune) bool { return c == '_' }) {
				if s == r.pattern {
					return true
				}
			}
		}
	}
	return false
}

// FuzzValidateEnvKey: an accepted key matches the key syntax, is bounded and
// never matches the forbidden tables, case-insensitively; the verdict does
// not depend on case.
func FuzzValidateEnvKey(f *testing.F) {
	for _, v := range vectorsOfKind(f, "env-policy") {
		var in envPolicyInput
		if err := json.Unmarshal(v.Input, &in); err != nil {
			f.Fatal(err)
		}
		if in.Op == "key" && len(in.Key) < 300 {
			f.Add(in.Key)
		}
	}
	f.Fuzz(func(t *testing.T, key string) {
		r := ValidateEnvKey(key)
		if r != nil {
			if !IsKnownCode(r.Code) {
				t.Fatalf("unknown code %q", r.Code)
			}
		} else {
			if !envKeySyntax.MatchString(key) || len(key) > MaxEnvKeyBytes {
				t.Fatalf("accepted malformed key %q", key)
			}
			if forbiddenByTable(key) {
				t.Fatalf("accepted forbidden key %q", key)
			}
		}
		if envKeySyntax.MatchString(key) {
			for _, k := range []string{strings.ToUpper(key), strings.ToLower(key)} {
				if (ValidateEnvKey(k) == nil) != (r == nil) {
					t.Fatalf("verdict for %q differs from %q", k, key)
				}
			}
		}
	})
}
