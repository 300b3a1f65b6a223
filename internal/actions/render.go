package actions

import (
	"encoding/json"
	"strings"

	"sensorium.dev/workbench/internal/actuation"
)

// Render turns a declaration and validated parameters into the argv and environment of
// the process: each template element is copied, or replaced by one parameter's value
// (strings verbatim; numbers and booleans in canonical JSON form; objects, arrays and null
// are refused — structured values travel only through {{params_json}}), or by the
// canonical JSON of all parameters. No shell is involved; nothing is split or expanded.
// The environment is exactly the declaration's (never inherited). Parameters go through
// ValidateParams first.
func Render(a *Action, params json.RawMessage) ([]string, []actuation.EnvVar, *actuation.Refusal) {
	canon, r := ValidateParams(a, params)
	if r != nil {
		return nil, nil, r
	}
	var values map[string]json.RawMessage
	if err := json.Unmarshal(canon, &values); err != nil {
		return nil, nil, actuation.Refuse(actuation.CodeParametersInvalid, "spec.parameters", "must be one JSON object")
	}
	argv := make([]string, 0, len(a.ArgvTemplate))
	for i, el := range a.ArgvTemplate {
		name, ok := placeholderName(el)
		switch {
		case !ok:
			return nil, nil, actuation.Refuse(actuation.CodeArgvTemplateInvalid, "argvTemplate", "element %d is not a literal or one placeholder", i)
		case name == "":
			argv = append(argv, el)
		case name == ParamsJSONPlaceholder:
			argv = append(argv, string(canon))
		default:
			v, has := values[name]
			if !has {
				return nil, nil, actuation.Refuse(actuation.CodeParametersInvalid, "spec.parameters."+name, "must be set: argvTemplate element %d names it", i)
			}
			s, r := scalar(name, v)
			if r != nil {
				return nil, nil, r
			}
			argv = append(argv, s)
		}
	}
	total := 0
	for _, s := range argv {
		total += len(s)
	}
	if total > actuation.MaxArgvTotalBytes {
		return nil, nil, actuation.Refuse(actuation.CodeParametersInvalid, "spec.parameters", "must render to at most %d argv bytes (got %d)", actuation.MaxArgvTotalBytes, total)
	}
	env := append([]actuation.EnvVar{}, a.Environment...)
	return argv, env, nil
}

func scalar(name string, v json.RawMessage) (string, *actuation.Refusal) {
	var x any
	if err := json.Unmarshal(v, &x); err != nil {
		return "", actuation.Refuse(actuation.CodeParametersInvalid, "spec.parameters."+name, "must be JSON")
	}
	switch t := x.(type) {
	case string:
		if strings.IndexByte(t, 0) >= 0 {
			return "", actuation.Refuse(actuation.CodeParametersInvalid, "spec.parameters."+name, "must not contain NUL")
		}
		return t, nil
	case float64, bool:
		return string(v), nil
	}
	return "", actuation.Refuse(actuation.CodeParametersInvalid, "spec.parameters."+name,
		"must be a string, number or boolean: structured values travel only through {{params_json}}")
}

// Process returns the program to execute for a rendered argv: the interpreter of a script
// that names one, else the executable path. argv is passed as rendered.
func Process(a *Action) string {
	if a.Executable.Kind == "script" && a.Executable.Interpreter != "" {
		return a.Executable.Interpreter
	}
	return a.Executable.Path
}
