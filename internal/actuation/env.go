package actuation

import (
	"slices"
	"strings"
	"unicode/utf8"
)

// Bounds of environment variables.
const (
	MaxEnvKeyBytes   = 256
	MaxEnvValueBytes = 32 << 10
)

// envMatch is how an envRule pattern is compared with the upper-cased key.
type envMatch int

const (
	envExact    envMatch = iota // key == pattern
	envPrefix                   // key starts with pattern
	envContains                 // pattern occurs anywhere in key
	envSegment                  // pattern equals one '_'-separated segment of key
)

// envRule forbids keys of one danger class.
type envRule struct {
	class   string
	match   envMatch
	pattern string // upper case
	code    Code
}

// Danger classes of environment keys. Matching is case-insensitive: the key
// is upper-cased before it is compared with the upper-case patterns.
const (
	// EnvClassEgress: proxy settings would route traffic out of a sandbox
	// whose egress is denied (refused with egress-forbidden).
	EnvClassEgress = "egress-proxy"
	// EnvClassLoader: dynamic loader and libc knobs that load code or data
	// chosen by the caller (LD_PRELOAD, GLIBC_TUNABLES, GCONV_PATH, ...).
	EnvClassLoader = "loader"
	// EnvClassInterpreter: shell, language runtime, VCS and pager hooks that
	// run caller-chosen code or commands at startup (BASH_ENV, PYTHONPATH,
	// NODE_OPTIONS, GIT_SSH_COMMAND, EDITOR, ...).
	EnvClassInterpreter = "interpreter-injection"
	// EnvClassAgentSocket: agent sockets and desktop sessions that would hand
	// the process ambient authority (SSH agent, D-Bus, X11/Wayland).
	EnvClassAgentSocket = "agent-socket"
	// EnvClassCredential: names that carry or locate secrets and cloud
	// credentials. Substring matching is deliberately broad (it also refuses
	// e.g. TOKENIZERS_PARALLELISM); a false refusal is cheaper than a leak.
	EnvClassCredential = "credential"
)

// forbiddenEnvRules is the table of forbidden environment keys, checked in
// order; the first matching rule decides class and code. PATH, HOME, TERM,
// LANG, TMPDIR and TZ are deliberately absent: profiles need them, and
// writes are confined by the sandbox, not by the name of a variable.
var forbiddenEnvRules = func() []envRule {
	var rules []envRule
	add := func(class string, code Code, m envMatch, patterns ...string) {
		for _, p := range patterns {
			rules = append(rules, envRule{class: class, match: m, pattern: p, code: code})
		}
	}
	add(EnvClassEgress, CodeEgressForbidden, envContains, "PROXY") // HTTP_PROXY, https_proxy, ALL_PROXY, NO_PROXY, FTP_PROXY, GIT_PROXY_COMMAND

	add(EnvClassLoader, CodeEnvKeyForbidden, envPrefix, "LD_", "DYLD_", "MALLOC_")
	add(EnvClassLoader, CodeEnvKeyForbidden, envExact,
		"GCONV_PATH", "GETCONF_DIR", "GLIBC_TUNABLES", "HOSTALIASES", "LOCALDOMAIN", "RES_OPTIONS",
		"RESOLV_HOST_CONF", "NIS_PATH", "NLSPATH", "LOCPATH")

	add(EnvClassInterpreter, CodeEnvKeyForbidden, envPrefix,
		"BASH_FUNC_", "GIT_CONFIG", "GIT_SSH", "LUA_INIT", "LUA_PATH", "LUA_CPATH", "SSH_ASKPASS", "R_PROFILE", "R_ENVIRON")
	add(EnvClassInterpreter, CodeEnvKeyForbidden, envExact,
		// shells
		"BASH_ENV", "ENV", "SHELLOPTS", "BASHOPTS", "PS4", "PROMPT_COMMAND", "IFS", "CDPATH", "GLOBIGNORE", "ZDOTDIR",
		// python
		"PYTHONSTARTUP", "PYTHONPATH", "PYTHONHOME", "PYTHONINSPECT", "PYTHONUSERBASE", "PYTHONEXECUTABLE",
		"PYTHONWARNINGS", "PYTHONBREAKPOINT", "PYTHONPYCACHEPREFIX", "PYTHONPLATLIBDIR",
		// perl, ruby, node, jvm, php, tcl, erlang, .NET
		"PERL5LIB", "PERL5OPT", "PERLLIB", "PERL5DB", "RUBYOPT", "RUBYLIB", "NODE_OPTIONS", "NODE_PATH",
		"JAVA_TOOL_OPTIONS", "_JAVA_OPTIONS", "JDK_JAVA_OPTIONS", "CLASSPATH", "PHPRC", "PHP_INI_SCAN_DIR",
		"TCLLIBPATH", "ERL_AFLAGS", "ERL_ZFLAGS", "ERL_FLAGS", "ELIXIR_ERL_OPTIONS", "DOTNET_STARTUP_HOOKS",
		// git and helpers that run a command
		"GIT_EXEC_PATH", "GIT_ASKPASS", "GIT_EDITOR", "GIT_SEQUENCE_EDITOR", "GIT_PAGER", "GIT_EXTERNAL_DIFF", "GIT_TEMPLATE_DIR",
		// editors, pagers, browsers
		"EDITOR", "VISUAL", "PAGER", "MANPAGER", "LESSOPEN", "LESSCLOSE", "BROWSER")

	add(EnvClassAgentSocket, CodeEnvKeyForbidden, envExact,
		"SSH_AUTH_SOCK", "SSH_AGENT_PID", "GPG_AGENT_INFO", "DBUS_SESSION_BUS_ADDRESS", "DBUS_SYSTEM_BUS_ADDRESS",
		"DISPLAY", "WAYLAND_DISPLAY", "WAYLAND_SOCKET", "XAUTHORITY", "XDG_RUNTIME_DIR", "GNOME_KEYRING_CONTROL",
		"PULSE_SERVER", "SWAYSOCK", "I3SOCK")

	add(EnvClassCredential, CodeEnvKeyForbidden, envContains,
		"TOKEN", "SECRET", "PASSWORD", "PASSWD", "PASSPHRASE", "CREDENTIAL", "API_KEY", "APIKEY", "ACCESS_KEY", "PRIVATE_KEY", "COOKIE")
	add(EnvClassCredential, CodeEnvKeyForbidden, envSegment, "AUTH", "OAUTH", "AUTHORIZATION", "BEARER", "JWT", "KEY")
	add(EnvClassCredential, CodeEnvKeyForbidden, envPrefix, "AWS_", "AZURE_", "CLOUDSDK_")
	add(EnvClassCredential, CodeEnvKeyForbidden, envExact,
		"KUBECONFIG", "DOCKER_CONFIG", "NETRC", "PGPASSFILE", "KRB5CCNAME", "KRB5_KTNAME", "GNUPGHOME")
	return rules
}()

// EnvClassConfigRedirect: keys that move where a program reads its configuration or
// repository from (HOME, XDG_CONFIG_HOME, GIT_*: a requester-chosen HOME is a chosen
// ~/.gitconfig with an alias or core.pager, GIT_DIR an embedded repository). A profile's
// own defaults (operator-owned) may set them; an override (the requester's) may not, and
// a profile may not list them in allowedOverrides.
const EnvClassConfigRedirect = "config-redirect"

// overrideOnlyForbidden reports whether key is of EnvClassConfigRedirect.
func overrideOnlyForbidden(key string) bool {
	k := strings.ToUpper(key)
	return k == "HOME" || k == "XDG_CONFIG_HOME" || k == "XDG_CONFIG_DIRS" || k == "XDG_DATA_HOME" ||
		(strings.HasPrefix(k, "GIT_") && !narrowingEnvKeys[k])
}

// ValidateOverrideKey is ValidateEnvKey for a key a requester sets (an intent override or
// a profile's allowedOverrides entry): also env-key-forbidden for EnvClassConfigRedirect.
func ValidateOverrideKey(key string) *Refusal {
	if r := ValidateEnvKey(key); r != nil {
		return r
	}
	if overrideOnlyForbidden(key) {
		return Refuse(CodeEnvKeyForbidden, "name", "must not be %q: %s variables are never taken from a requester", key, EnvClassConfigRedirect)
	}
	return nil
}

// narrowingEnvKeys are exact keys that match a forbidden pattern but can only take
// authority away: GIT_CONFIG_NOSYSTEM stops git from reading /etc/gitconfig (which the
// sandbox does not let it read anyway). They are admitted despite their prefix.
var narrowingEnvKeys = map[string]bool{"GIT_CONFIG_NOSYSTEM": true}

// matchForbiddenEnv returns the first forbidden rule matching key.
func matchForbiddenEnv(key string) (envRule, bool) {
	k := strings.ToUpper(key)
	if narrowingEnvKeys[k] {
		return envRule{}, false
	}
	var segments []string
	for _, r := range forbiddenEnvRules {
		var hit bool
		switch r.match {
		case envExact:
			hit = k == r.pattern
		case envPrefix:
			hit = strings.HasPrefix(k, r.pattern)
		case envContains:
			hit = strings.Contains(k, r.pattern)
		case envSegment:
			if segments == nil {
				segments = strings.Split(k, "_")
			}
			hit = slices.Contains(segments, r.pattern)
		}
		if hit {
			return r, true
		}
	}
	return envRule{}, false
}

// EnvKeyClass returns the danger class of a forbidden key ("" when the key
// matches no forbidden rule).
func EnvKeyClass(key string) string {
	r, _ := matchForbiddenEnv(key)
	return r.class
}

// ValidateEnvKey checks one environment key: 1..MaxEnvKeyBytes bytes of
// ^[A-Za-z_][A-Za-z0-9_]*$ (env-key-invalid), and not in the forbidden
// tables (env-key-forbidden; proxy keys egress-forbidden).
func ValidateEnvKey(key string) *Refusal {
	const field = "name"
	if key == "" {
		return Refuse(CodeEnvKeyInvalid, field, "must not be empty")
	}
	if len(key) > MaxEnvKeyBytes {
		return Refuse(CodeEnvKeyInvalid, field, "must not be longer than %d bytes", MaxEnvKeyBytes)
	}
	for i := 0; i < len(key); i++ {
		c := key[i]
		ok := c == '_' || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return Refuse(CodeEnvKeyInvalid, field, "must match ^[A-Za-z_][A-Za-z0-9_]*$ (got %q)", truncateForMessage(key))
		}
	}
	if r, hit := matchForbiddenEnv(key); hit {
		return Refuse(r.code, field, "must not be %q: %s variables are never passed to a command", key, r.class)
	}
	return nil
}

// ValidateEnvVar checks a key (ValidateEnvKey) and its value: at most
// MaxEnvValueBytes, no NUL, valid UTF-8 (env-value-invalid). An empty value is
// an explicit empty value.
func ValidateEnvVar(v EnvVar) []*Refusal { return validateEnvVarAt(v, "") }

func validateEnvVarAt(v EnvVar, base string) []*Refusal {
	var rs []*Refusal
	if r := ValidateEnvKey(v.Name); r != nil {
		r.Field = fieldJoin(base, "name")
		rs = append(rs, r)
	}
	vf := fieldJoin(base, "value")
	switch {
	case len(v.Value) > MaxEnvValueBytes:
		rs = append(rs, Refuse(CodeEnvValueInvalid, vf, "must not be longer than %d bytes", MaxEnvValueBytes))
	case strings.IndexByte(v.Value, 0) >= 0:
		rs = append(rs, Refuse(CodeEnvValueInvalid, vf, "must not contain NUL"))
	case !utf8.ValidString(v.Value):
		rs = append(rs, Refuse(CodeEnvValueInvalid, vf, "must be valid UTF-8"))
	}
	return rs
}

// validateOverrides checks intent overrides against the profile's policy.
func validateOverrides(p Profile, overrides []EnvVar, base string) []*Refusal {
	var rs []*Refusal
	if len(overrides) > MaxEnvOverrides {
		rs = append(rs, Refuse(CodeEnvOverrideNotAllowed, base, "must not have more than %d entries (got %d)", MaxEnvOverrides, len(overrides)))
	}
	seen := make(map[string]bool, len(overrides))
	for i, v := range overrides[:min(len(overrides), MaxEnvOverrides)] {
		f := fieldIndex(base, i)
		vrs := validateEnvVarAt(v, f)
		if len(vrs) == 0 && overrideOnlyForbidden(v.Name) {
			r := ValidateOverrideKey(v.Name)
			r.Field = fieldJoin(f, "name")
			vrs = append(vrs, r)
		}
		rs = append(rs, vrs...)
		if slices.ContainsFunc(vrs, func(r *Refusal) bool { return r.Field == fieldJoin(f, "name") }) {
			continue
		}
		nameField := fieldJoin(f, "name")
		switch {
		case seen[v.Name]:
			rs = append(rs, Refuse(CodeEnvKeyInvalid, nameField, "must not repeat %q", v.Name))
		case p.Env.Mode == EnvModeAllowlistedOverrides && slices.Contains(p.Env.AllowedOverrides, v.Name):
		case p.Env.Mode == EnvModeAllowlistedOverrides:
			rs = append(rs, Refuse(CodeEnvOverrideNotAllowed, nameField, "must be one of the profile's allowed overrides (got %q)", v.Name))
		default:
			rs = append(rs, Refuse(CodeEnvOverrideNotAllowed, nameField, "must not be overridden: the profile's env mode is %q", truncateForMessage(string(p.Env.Mode))))
		}
		seen[v.Name] = true
	}
	return rs
}

// CuratedEnv builds the complete environment of a process: the profile's
// defaults, then the admitted overrides, sorted by key. Nothing is inherited
// from the host; the node agent adds nothing but what its own contract
// documents (for example TERM for a PTY). The first refusal of the profile's
// env policy or of the overrides is returned instead.
func CuratedEnv(p Profile, overrides []EnvVar) ([]EnvVar, *Refusal) {
	if r := FirstRefusal(validateEnvPolicy(p.Env)); r != nil {
		return nil, r
	}
	if r := FirstRefusal(validateOverrides(p, overrides, "spec.env")); r != nil {
		return nil, r
	}
	m := make(map[string]string, len(p.Env.Defaults)+len(overrides))
	for _, v := range p.Env.Defaults {
		m[v.Name] = v.Value
	}
	for _, v := range overrides {
		m[v.Name] = v.Value
	}
	out := make([]EnvVar, 0, len(m))
	for k, v := range m {
		out = append(out, EnvVar{Name: k, Value: v})
	}
	slices.SortFunc(out, func(a, b EnvVar) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}
