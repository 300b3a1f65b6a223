package fsaccess

import (
	"strings"

	"sensorium.dev/workbench/internal/actuation"
)

// Lexical caps: the actuation core's.
const (
	MaxPathBytes      = actuation.MaxPathBytes          // path-too-long
	MaxComponentBytes = actuation.MaxPathComponentBytes // path-too-long (NAME_MAX)
)

// CheckRel is the lexical pre-check applied to every relative path before the
// kernel sees it: the actuation core's one rule, actuation.ValidateRelativePath
// (golden vectors: test/vectors/relative-path.json). requireFile=true refuses
// the empty path (root self-access); requireFile=false accepts "" as "the root
// itself". The kernel re-checks at access time; this check only makes refusals
// early and well-coded.
func CheckRel(p string, requireFile bool) error {
	if r := actuation.ValidateRelativePath(p, requireFile); r != nil {
		return actuation.Refusef(actuation.Code(string(r.Code)), "path %q: %s", p, r.Message)
	}
	return nil
}

// splitParent splits a checked non-empty relative path into its parent ("." for
// top level) and final component.
func splitParent(rel string) (string, string) {
	i := strings.LastIndexByte(rel, '/')
	if i < 0 {
		return ".", rel
	}
	return rel[:i], rel[i+1:]
}

// kernelPath maps the root-itself path "" to "." for openat2.
func kernelPath(rel string) string {
	if rel == "" {
		return "."
	}
	return rel
}
