package actions

import (
	"encoding/json"
	"fmt"
	"path"
	"regexp"
	"slices"
	"strings"

	"sensorium.dev/workbench/internal/actuation"
)

// Bounds of a declaration.
const (
	MaxIDBytes            = 128
	MaxActions            = 128
	MaxArgvElements       = 64
	MaxPointerFields      = 32
	MaxEndpoints          = 32
	MaxMediaTypes         = 32
	MaxScriptRoots        = 16
	MaxSchemaBytes        = 64 << 10
	MaxEnvironmentEntries = 64
)

// ParamsJSONPlaceholder renders the RFC 8785 canonical JSON of all parameters.
const ParamsJSONPlaceholder = "params_json"

var (
	identPart    = `[A-Za-z_][A-Za-z0-9_.-]*`
	idRE         = regexp.MustCompile(`^` + identPart + `(/` + identPart + `)?$`)
	pointerRE    = regexp.MustCompile(`^` + identPart + `(/` + identPart + `)?(\.\*)?$`)
	placeholder  = regexp.MustCompile(`^\{\{([A-Za-z_][A-Za-z0-9_]*)\}\}$`)
	hexPinRE     = regexp.MustCompile(`^[0-9a-f]{64}$`)
	mediaTypeRE  = regexp.MustCompile(`^[a-z0-9][a-z0-9!#$&^_.+-]{0,62}/[a-z0-9][a-z0-9!#$&^_.+-]{0,62}$`)
	hostRE       = regexp.MustCompile(`^([a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?\.)*[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$|^[0-9a-f:.]+$`)
	sensValueRE  = regexp.MustCompile(`^[a-z][a-z0-9-]{0,62}$`)
	sensOverride = []string{"override", "downgrade", "loosen", "relax", "lower", "narrow"}
)

// ValidateID checks an action id: non-empty (action-id-missing), at most 128 bytes of the
// bounded identifier shape with at most one "/" (action-id-format-invalid). Surrounding
// whitespace is an error, never trimmed.
func ValidateID(id, field string) *actuation.Refusal {
	switch {
	case id == "":
		return actuation.Refuse(actuation.CodeActionIDMissing, field, "must not be empty")
	case len(id) > MaxIDBytes:
		return actuation.Refuse(actuation.CodeActionIDFormatInvalid, field, "must be at most %d bytes (got %d)", MaxIDBytes, len(id))
	case !idRE.MatchString(id):
		return actuation.Refuse(actuation.CodeActionIDFormatInvalid, field, "must match %s with at most one / (got %q)", identPart, clip(id))
	}
	return nil
}

// ValidatePointerField checks one resultPointerFields entry.
func ValidatePointerField(f, field string) *actuation.Refusal {
	if f == "" || len(f) > MaxIDBytes || !pointerRE.MatchString(f) {
		return actuation.Refuse(actuation.CodeResultPointerFieldInvalid, field,
			"must be an exact name or one explicit prefix ending in .* (%s, at most one /, at most %d bytes); got %q", identPart, MaxIDBytes, clip(f))
	}
	if strings.Contains(strings.TrimSuffix(f, ".*"), "*") {
		return actuation.Refuse(actuation.CodeResultPointerFieldInvalid, field, "must not contain an inner wildcard (got %q)", clip(f))
	}
	return nil
}

// ValidateCatalog checks every structural rule of seed 002 and returns every refusal, in
// declaration order. An empty result means the catalog is well-formed.
func ValidateCatalog(c Catalog) []*actuation.Refusal {
	var rs []*actuation.Refusal
	if len(c.Actions) > MaxActions {
		rs = append(rs, actuation.Refuse(actuation.CodeActionClassParamsInvalid, "spec.actions", "must not declare more than %d actions", MaxActions))
	}
	seen := map[string]int{}
	for i := range c.Actions {
		a := &c.Actions[i]
		base := fmt.Sprintf("spec.actions[%d]", i)
		rs = append(rs, ValidateAction(a, base)...)
		if a.ID != "" {
			if j, dup := seen[a.ID]; dup {
				rs = append(rs, actuation.Refuse(actuation.CodeActionIDDuplicate, base+".id", "must be unique: %q is also spec.actions[%d]", clip(a.ID), j))
			} else {
				seen[a.ID] = i
			}
		}
	}
	return rs
}

// ActionRefusals returns the refusals of one action of a catalog, including duplicates of
// its id; nil when the declaration is part of the effective catalog.
func ActionRefusals(c Catalog, id string) []*actuation.Refusal {
	var rs []*actuation.Refusal
	n := 0
	for i := range c.Actions {
		if c.Actions[i].ID != id {
			continue
		}
		n++
		if n == 1 {
			rs = append(rs, ValidateAction(&c.Actions[i], fmt.Sprintf("spec.actions[%d]", i))...)
		}
	}
	if n > 1 {
		rs = append(rs, actuation.Refuse(actuation.CodeActionIDDuplicate, "spec.actions", "must be unique: %q is declared %d times", clip(id), n))
	}
	return rs
}

// ValidateAction checks one declaration; base is its field path.
func ValidateAction(a *Action, base string) []*actuation.Refusal {
	var rs []*actuation.Refusal
	add := func(r *actuation.Refusal) {
		if r != nil {
			rs = append(rs, r)
		}
	}
	f := func(s string) string { return base + "." + s }
	add(ValidateID(a.ID, f("id")))
	if !a.Class.Known() {
		add(actuation.Refuse(actuation.CodeActionClassUnknown, f("class"), "must be one of C1..C7 (got %q)", clip(string(a.Class))))
	}
	rs = append(rs, validateExecutable(a, base)...)
	rs = append(rs, validateTemplate(a, base)...)
	rs = append(rs, validateClassBlocks(a, base)...)
	if a.WorkingDirectory != nil {
		add(validateCwd(*a.WorkingDirectory, f("workingDirectory")))
	}
	// Environment: complete, never inherited; keys through the actuation core.
	if len(a.Environment) > MaxEnvironmentEntries {
		add(actuation.Refuse(actuation.CodeEnvKeyInvalid, f("environment"), "must not have more than %d entries", MaxEnvironmentEntries))
	}
	names := map[string]bool{}
	for i, e := range a.Environment {
		ef := fmt.Sprintf("%s[%d]", f("environment"), i)
		for _, r := range actuation.ValidateEnvVar(e) {
			r.Field = ef + "." + r.Field
			add(r)
		}
		if e.Name == "TMPDIR" || strings.HasPrefix(e.Name, "WORKBENCH_") {
			add(actuation.Refuse(actuation.CodeEnvKeyForbidden, ef+".name", "must not be %q: the node agent sets TMPDIR and WORKBENCH_* for every run", clip(e.Name)))
		}
		if names[e.Name] {
			add(actuation.Refuse(actuation.CodeEnvKeyInvalid, ef+".name", "must be unique (%q)", clip(e.Name)))
		}
		names[e.Name] = true
	}
	// Timeouts and output caps.
	switch {
	case a.DefaultTimeoutSeconds <= 0:
		add(actuation.Refuse(actuation.CodeTimeoutInvalid, f("defaultTimeoutSeconds"), "must be positive"))
	case a.MaxTimeoutSeconds < a.DefaultTimeoutSeconds:
		add(actuation.Refuse(actuation.CodeTimeoutInvalid, f("maxTimeoutSeconds"), "must be at least defaultTimeoutSeconds (%d)", a.DefaultTimeoutSeconds))
	case a.MaxTimeoutSeconds > actuation.MaxCommandTimeoutSeconds:
		add(actuation.Refuse(actuation.CodeTimeoutAboveMax, f("maxTimeoutSeconds"), "must be at most %d seconds, the node ceiling", actuation.MaxCommandTimeoutSeconds))
	}
	for name, v := range map[string]int64{"stdoutBytes": a.OutputLimits.StdoutBytes, "stderrBytes": a.OutputLimits.StderrBytes} {
		switch {
		case v <= 0:
			add(actuation.Refuse(actuation.CodeOutputCapInvalid, f("outputLimits."+name), "must be positive"))
		case v > actuation.MaxCommandOutputBytes:
			add(actuation.Refuse(actuation.CodeOutputCapAboveMax, f("outputLimits."+name), "must be at most %d bytes, the node ceiling", actuation.MaxCommandOutputBytes))
		}
	}
	rs = append(rs, validateResultContract(a.ResultContract, f("resultContract"))...)
	rs = append(rs, validateSensitivity(a.Sensitivity, f("sensitivity"))...)
	rs = append(rs, validateObservationLane(a, f)...)
	if len(a.ParametersSchema) > 0 {
		if _, r := compileSchema(a.ParametersSchema); r != nil {
			r.Field = f("parametersSchema")
			add(r)
		}
	}
	sortRefusals(rs)
	return rs
}

// sortRefusals orders refusals by field then code, so output does not depend on map order.
func sortRefusals(rs []*actuation.Refusal) {
	slices.SortStableFunc(rs, func(x, y *actuation.Refusal) int {
		if c := strings.Compare(x.Field, y.Field); c != 0 {
			return c
		}
		return strings.Compare(string(x.Code), string(y.Code))
	})
}

func validateExecutable(a *Action, base string) []*actuation.Refusal {
	var rs []*actuation.Refusal
	e := a.Executable
	f := base + ".executable"
	switch e.Kind {
	case "binary", "script":
	default:
		rs = append(rs, actuation.Refuse(actuation.CodeActionClassParamsInvalid, f+".kind", "must be binary or script (got %q)", clip(e.Kind)))
	}
	if e.Path == "" {
		rs = append(rs, actuation.Refuse(actuation.CodeScriptExecutableMissing, f+".path", "must name the executable"))
	} else if r := actuation.CheckExecutable(e.Path); r != nil {
		r.Field = f + ".path"
		rs = append(rs, r)
	}
	if e.Interpreter != "" {
		if e.Kind != "script" {
			rs = append(rs, actuation.Refuse(actuation.CodeActionClassParamsInvalid, f+".interpreter", "must be set only for kind script"))
		} else if r := actuation.CheckExecutable(e.Interpreter); r != nil {
			r.Field = f + ".interpreter"
			rs = append(rs, r)
		}
	}
	if e.SHA256 != "" && !hexPinRE.MatchString(e.SHA256) {
		rs = append(rs, actuation.Refuse(actuation.CodeScriptHashMismatch, f+".sha256", "must be 64 lowercase hex digits, or unset (a malformed pin never matches)"))
	}
	if a.Class == ClassAllowlistedScript && e.Kind != "script" {
		rs = append(rs, actuation.Refuse(actuation.CodeActionClassParamsInvalid, f+".kind", "must be script for class C2 (allowlisted-script)"))
	}
	switch {
	case e.Kind == "script" && a.Script == nil:
		rs = append(rs, actuation.Refuse(actuation.CodeActionClassParamsInvalid, base+".script", "must declare allowedRoots for a script executable"))
	case e.Kind == "binary" && a.Script != nil:
		rs = append(rs, actuation.Refuse(actuation.CodeActionClassParamsInvalid, base+".script", "must not be set for a binary executable"))
	case a.Script != nil:
		sf := base + ".script.allowedRoots"
		if len(a.Script.AllowedRoots) == 0 {
			rs = append(rs, actuation.Refuse(actuation.CodeWorkingDirectoryForbidden, sf, "must name at least one root: an empty list is an error, never a wildcard"))
		}
		if len(a.Script.AllowedRoots) > MaxScriptRoots {
			rs = append(rs, actuation.Refuse(actuation.CodeWorkingDirectoryForbidden, sf, "must not name more than %d roots", MaxScriptRoots))
		}
		under := false
		for i, root := range a.Script.AllowedRoots {
			if !isAbsClean(root) || root == "/" {
				rs = append(rs, actuation.Refuse(actuation.CodeWorkingDirectoryForbidden, fmt.Sprintf("%s[%d]", sf, i), "must be an absolute, clean directory other than / (got %q)", clip(root)))
				continue
			}
			if strings.HasPrefix(e.Path, root+"/") {
				under = true
			}
		}
		if e.Path != "" && !under && len(a.Script.AllowedRoots) > 0 {
			rs = append(rs, actuation.Refuse(actuation.CodeWorkingDirectoryForbidden, f+".path", "must lie beneath one of script.allowedRoots (got %q)", clip(e.Path)))
		}
	}
	return rs
}

func isAbsClean(p string) bool {
	return p != "" && p[0] == '/' && path.Clean(p) == p && len(p) <= actuation.MaxPathBytes && !strings.ContainsAny(p, "\x00\\")
}

// placeholderName returns the placeholder of a template element, "" for a literal, and
// ok=false for a malformed element (braces that are not exactly one placeholder).
func placeholderName(el string) (string, bool) {
	if m := placeholder.FindStringSubmatch(el); m != nil {
		return m[1], true
	}
	if strings.Contains(el, "{{") || strings.Contains(el, "}}") {
		return "", false
	}
	return "", true
}

func validateTemplate(a *Action, base string) []*actuation.Refusal {
	var rs []*actuation.Refusal
	f := base + ".argvTemplate"
	t := a.ArgvTemplate
	if len(t) == 0 {
		return append(rs, actuation.Refuse(actuation.CodeArgvTemplateInvalid, f, "must have at least one element (argv[0])"))
	}
	if len(t) > MaxArgvElements {
		rs = append(rs, actuation.Refuse(actuation.CodeArgvTemplateInvalid, f, "must not have more than %d elements", MaxArgvElements))
	}
	props, schemaKnown := schemaProperties(a.ParametersSchema)
	usesParamsJSON := false
	for i, el := range t {
		ef := fmt.Sprintf("%s[%d]", f, i)
		name, ok := placeholderName(el)
		switch {
		case !ok:
			rs = append(rs, actuation.Refuse(actuation.CodeArgvTemplateInvalid, ef, "must be a literal or exactly one placeholder {{name}}; no embedding, conditionals or expansion (got %q)", clip(el)))
		case strings.IndexByte(el, 0) >= 0:
			rs = append(rs, actuation.Refuse(actuation.CodeArgvTemplateInvalid, ef, "must not contain NUL"))
		case i == 0 && name != "":
			rs = append(rs, actuation.Refuse(actuation.CodeArgvTemplateInvalid, ef, "must be a literal: a caller never supplies the program"))
		case i == 0 && el == "":
			rs = append(rs, actuation.Refuse(actuation.CodeArgvTemplateInvalid, ef, "must name the program"))
		case name == ParamsJSONPlaceholder:
			usesParamsJSON = true
		case name != "" && a.Class == ClassAllowlistedScript:
			rs = append(rs, actuation.Refuse(actuation.CodeArgvTemplateInvalid, ef, "must not name a single parameter: C2 passes parameters only as --params-json {{params_json}}"))
		case name != "" && (!schemaKnown || !props[name]):
			rs = append(rs, actuation.Refuse(actuation.CodeArgvTemplateInvalid, ef, "must name a property declared by parametersSchema (got %q)", name))
		case name == "" && (el == "-c" || el == "--command") && i >= 1 && isShellName(t[0]):
			rs = append(rs, actuation.Refuse(actuation.CodeShellString, ef, "must not pass a shell command string"))
		}
	}
	if isShellName(t[0]) {
		rs = append(rs, actuation.Refuse(actuation.CodeShellString, f+"[0]", "must not be a shell (%q)", clip(t[0])))
	}
	if a.Class == ClassAllowlistedScript {
		ok := false
		for i := 1; i < len(t); i++ {
			if t[i] == "{{params_json}}" && t[i-1] == "--params-json" {
				ok = true
			}
		}
		if !ok || strings.Count(strings.Join(t, "\x00"), "{{params_json}}") != 1 {
			rs = append(rs, actuation.Refuse(actuation.CodeArgvTemplateInvalid, f, "must pass parameters as exactly one --params-json {{params_json}} pair for class C2"))
		}
	}
	_ = usesParamsJSON
	if a.Executable.Kind == "script" && a.Executable.Interpreter != "" {
		// The interpreter runs the script file; every placeholder comes after it, where the
		// interpreter hands atoms to the script, and no literal before it is inline code.
		si := slices.Index(t, a.Executable.Path)
		if si < 1 {
			return append(rs, actuation.Refuse(actuation.CodeArgvTemplateInvalid, f, "must pass the script path %q as a literal to the interpreter", clip(a.Executable.Path)))
		}
		for i := 1; i < si; i++ {
			if n, _ := placeholderName(t[i]); n != "" {
				rs = append(rs, actuation.Refuse(actuation.CodeArgvTemplateInvalid, fmt.Sprintf("%s[%d]", f, i), "must not place a parameter before the script path"))
			}
		}
		if r := actuation.CheckTemplateInlineCode(a.Executable.Interpreter, t[1:si], false, f); r != nil {
			rs = append(rs, r)
		}
		return rs
	}
	if a.Executable.Kind == "binary" && a.Executable.Path != "" {
		var lits []string
		variable := false
		for _, el := range t[1:] {
			if n, _ := placeholderName(el); n != "" {
				variable = true
			} else {
				lits = append(lits, el)
			}
		}
		if r := actuation.CheckTemplateInlineCode(a.Executable.Path, lits, variable, f); r != nil {
			rs = append(rs, r)
		}
	}
	return rs
}

var shellNames = map[string]bool{"sh": true, "bash": true, "dash": true, "zsh": true, "ksh": true, "csh": true, "tcsh": true, "fish": true, "ash": true, "busybox": true, "env": true, "sudo": true, "su": true, "doas": true}

func isShellName(s string) bool { return shellNames[path.Base(s)] }

func validateCwd(c actuation.CwdAddress, field string) *actuation.Refusal {
	if r := actuation.ValidateRootName(c.Root); r != nil {
		return actuation.Refuse(actuation.CodeWorkingDirectoryForbidden, field+".root", "must be a root name of the environment: %s", r.Message)
	}
	if c.Path != "" {
		if r := actuation.ValidateRelativePath(c.Path, false); r != nil {
			return actuation.Refuse(actuation.CodeWorkingDirectoryForbidden, field+".path", "must be a clean relative path beneath the root: %s", r.Message)
		}
	}
	return nil
}

func validateClassBlocks(a *Action, base string) []*actuation.Refusal {
	var rs []*actuation.Refusal
	bad := func(field, format string, args ...any) {
		rs = append(rs, actuation.Refuse(actuation.CodeActionClassParamsInvalid, base+"."+field, format, args...))
	}
	want := map[string]bool{}
	if a.Class == ClassComposed {
		if a.Composed == nil || len(a.Composed.Effects) == 0 {
			bad("composed.effects", "must name at least one effect of read, scoped-fs-write, egress-network, artifact-produce for class C6")
		} else {
			for i, e := range a.Composed.Effects {
				switch e {
				case EffectRead, EffectScopedFSWrite, EffectEgressNetwork, EffectArtifactProduce:
				default:
					bad(fmt.Sprintf("composed.effects[%d]", i), "must be one of read, scoped-fs-write, egress-network, artifact-produce (got %q)", clip(e))
				}
				if slices.Index(a.Composed.Effects, e) < i {
					bad(fmt.Sprintf("composed.effects[%d]", i), "must not repeat %q", clip(e))
				}
			}
		}
	} else if a.Composed != nil {
		bad("composed", "must be set only for class C6")
	}
	if a.Class.Known() {
		for _, e := range a.Effects() {
			want[e] = true
		}
	}
	block := func(name string, present bool, effect string) bool {
		switch {
		case want[effect] && !present:
			bad(name, "must be set: class %s (%s) needs it", a.Class, SeedName(a.Class))
		case !want[effect] && present && a.Class.Known():
			bad(name, "must not be set for class %s (%s)", a.Class, SeedName(a.Class))
		default:
			return present
		}
		return false
	}
	if block("fsWrite", a.FSWrite != nil, EffectScopedFSWrite) {
		w := a.FSWrite
		if r := validateCwd(w.WriteRoot, base+".fsWrite.writeRoot"); r != nil {
			rs = append(rs, r)
		}
		if w.MaxBytesTotal <= 0 || w.MaxBytesPerFile <= 0 {
			bad("fsWrite", "must cap maxBytesTotal and maxBytesPerFile with positive values")
		} else if w.MaxBytesPerFile > w.MaxBytesTotal {
			bad("fsWrite.maxBytesPerFile", "must not exceed maxBytesTotal")
		}
		if w.PathPattern != "" {
			if _, err := regexp.Compile(w.PathPattern); err != nil {
				bad("fsWrite.pathPattern", "must be an RE2 regular expression: %v", err)
			}
		}
	}
	if block("egress", a.Egress != nil, EffectEgressNetwork) {
		g := a.Egress
		if len(g.Endpoints) == 0 || len(g.Endpoints) > MaxEndpoints {
			bad("egress.endpoints", "must name 1..%d endpoints: an empty list is an error, never a wildcard", MaxEndpoints)
		}
		for i, ep := range g.Endpoints {
			ef := fmt.Sprintf("egress.endpoints[%d]", i)
			if ep.Host == "" || len(ep.Host) > 253 || !hostRE.MatchString(ep.Host) {
				bad(ef+".host", "must be a lowercase DNS name or an IP literal, no wildcard (got %q)", clip(ep.Host))
			}
			if ep.Port < 1 || ep.Port > 65535 {
				bad(ef+".port", "must be 1..65535 (got %d)", ep.Port)
			}
			switch ep.Protocol {
			case "tcp", "udp", "http", "https":
			default:
				bad(ef+".protocol", "must be tcp, udp, http or https (got %q)", clip(ep.Protocol))
			}
		}
		if g.MaxBytesTotal <= 0 || g.MaxBytesPerConnection <= 0 {
			bad("egress", "must cap maxBytesTotal and maxBytesPerConnection with positive values")
		} else if g.MaxBytesPerConnection > g.MaxBytesTotal {
			bad("egress.maxBytesPerConnection", "must not exceed maxBytesTotal")
		}
	}
	if block("artifact", a.Artifact != nil, EffectArtifactProduce) {
		x := a.Artifact
		if x.MaxCount <= 0 || x.MaxBytesPer <= 0 || x.MaxBytesTotal <= 0 {
			bad("artifact", "must cap maxCount, maxBytesPer and maxBytesTotal with positive values")
		} else if x.MaxBytesPer > x.MaxBytesTotal {
			bad("artifact.maxBytesPer", "must not exceed maxBytesTotal")
		}
		if len(x.AllowedMediaTypes) == 0 || len(x.AllowedMediaTypes) > MaxMediaTypes {
			bad("artifact.allowedMediaTypes", "must name 1..%d media types", MaxMediaTypes)
		}
		for i, m := range x.AllowedMediaTypes {
			if !mediaTypeRE.MatchString(m) {
				bad(fmt.Sprintf("artifact.allowedMediaTypes[%d]", i), "must be an exact lowercase type/subtype, no wildcard or parameters (got %q)", clip(m))
			}
		}
	}
	return rs
}

func validateResultContract(rc ResultContract, base string) []*actuation.Refusal {
	var rs []*actuation.Refusal
	switch rc.StdoutFormat {
	case "text", "json":
	default:
		rs = append(rs, actuation.Refuse(actuation.CodeResultSchemaInvalid, base+".stdoutFormat", "must be text or json (got %q)", clip(rc.StdoutFormat)))
	}
	if len(rc.ResultPointerFields) > 0 && rc.StdoutFormat != "json" {
		rs = append(rs, actuation.Refuse(actuation.CodeResultPointerFieldInvalid, base+".resultPointerFields", "must be empty unless stdoutFormat is json"))
	}
	if len(rc.ResultPointerFields) > MaxPointerFields {
		rs = append(rs, actuation.Refuse(actuation.CodeResultPointerFieldInvalid, base+".resultPointerFields", "must not list more than %d fields", MaxPointerFields))
	}
	for i, p := range rc.ResultPointerFields {
		pf := fmt.Sprintf("%s.resultPointerFields[%d]", base, i)
		if r := ValidatePointerField(p, pf); r != nil {
			rs = append(rs, r)
		} else if slices.Index(rc.ResultPointerFields, p) < i {
			rs = append(rs, actuation.Refuse(actuation.CodeResultPointerFieldInvalid, pf, "must not repeat %q", clip(p)))
		}
	}
	return rs
}

// validateSensitivity admits only the baseline class key ("class", or the legacy alias
// "default_class"); override-like keys and any other key are forbidden (seed 002).
func validateSensitivity(m map[string]string, base string) []*actuation.Refusal {
	var rs []*actuation.Refusal
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		kf := base + "." + k
		lk := strings.ToLower(k)
		switch {
		case k == "class" || k == "default_class":
			if !sensValueRE.MatchString(m[k]) {
				rs = append(rs, actuation.Refuse(actuation.CodeSensitivityKeysForbidden, kf, "must be a sensitivity class name (got %q)", clip(m[k])))
			}
		case slices.ContainsFunc(sensOverride, func(w string) bool { return strings.Contains(lk, w) }):
			rs = append(rs, actuation.Refuse(actuation.CodeSensitivityOverrideForbidden, kf, "must not override sensitivity: a narrower effective class comes only from host policy"))
		default:
			rs = append(rs, actuation.Refuse(actuation.CodeSensitivityKeysForbidden, kf, "must not be set: only class (or default_class) is admitted"))
		}
	}
	if _, a := m["class"]; a {
		if _, b := m["default_class"]; b {
			rs = append(rs, actuation.Refuse(actuation.CodeSensitivityKeysForbidden, base, "must not set both class and default_class"))
		}
	}
	return rs
}

// schemaProperties returns the top-level properties a schema declares; known is false
// when there is no schema or it does not parse.
func schemaProperties(raw json.RawMessage) (map[string]bool, bool) {
	if len(raw) == 0 {
		return nil, false
	}
	var s struct {
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(raw, &s); err != nil {
		return nil, false
	}
	out := map[string]bool{}
	for k := range s.Properties {
		out[k] = true
	}
	return out, true
}

func clip(s string) string {
	if len(s) > 80 {
		return s[:80] + "…"
	}
	return s
}
