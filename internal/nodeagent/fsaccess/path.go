package fsaccess

import (
	"strings"
	"unicode/utf8"
)

// Lexical caps.
const (
	MaxPathBytes      = 4096 // path-too-long
	MaxComponentBytes = 255  // path-too-long (NAME_MAX)
)

// CheckRel is the lexical pre-check applied to every relative path before the
// kernel sees it. requireFile=true refuses the empty path (root self-access);
// requireFile=false accepts "" as "the root itself". Rules: no leading slash,
// no NUL/control/backslash/invalid UTF-8, no empty, "." or ".." components
// (so no trailing or doubled slash), bounded length. The kernel re-checks at
// access time; this check only makes refusals early and well-coded.
func CheckRel(p string, requireFile bool) error {
	if p == "" {
		if requireFile {
			return Errorf(CodePathEmpty, "empty path where a file is required")
		}
		return nil
	}
	if len(p) > MaxPathBytes {
		return Errorf(CodePathTooLong, "path is %d bytes, max %d", len(p), MaxPathBytes)
	}
	if !utf8.ValidString(p) {
		return Errorf(CodePathInvalidCharacter, "path %q is not valid UTF-8", p)
	}
	for i := 0; i < len(p); i++ {
		c := p[i]
		if c == 0 || c < 0x20 || c == 0x7f || c == '\\' {
			return Errorf(CodePathInvalidCharacter, "path %q contains a forbidden character at byte %d", p, i)
		}
	}
	if p[0] == '/' {
		return Errorf(CodePathAbsolute, "path %q is absolute", p)
	}
	for _, comp := range strings.Split(p, "/") {
		switch comp {
		case "..":
			return Errorf(CodePathTraversal, "path %q contains '..'", p)
		case "", ".":
			return Errorf(CodePathInvalidComponent, "path %q has an empty or '.' component", p)
		}
		if len(comp) > MaxComponentBytes {
			return Errorf(CodePathTooLong, "path %q has a component over %d bytes", p, MaxComponentBytes)
		}
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
