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
// requireFile=false accepts "" as "the root itself". Rules, in the order of the
// shared golden vectors (test/vectors/relative-path.json): invalid character
// (invalid UTF-8, NUL, backslash, C0/C1 control, DEL), total length, absolute,
// any ".." component, empty/"." component or trailing slash, component length.
// The kernel re-checks at access time; this check only makes refusals early
// and well-coded.
func CheckRel(p string, requireFile bool) error {
	if p == "" {
		if requireFile {
			return Errorf(CodePathEmpty, "empty path where a file is required")
		}
		return nil
	}
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRuneInString(p[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return Errorf(CodePathInvalidCharacter, "path is not valid UTF-8 at byte %d", i)
		case r == 0, r == '\\', r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
			return Errorf(CodePathInvalidCharacter, "path %q contains a forbidden character at byte %d", p, i)
		}
		i += size
	}
	if len(p) > MaxPathBytes {
		return Errorf(CodePathTooLong, "path is %d bytes, max %d", len(p), MaxPathBytes)
	}
	if p[0] == '/' {
		return Errorf(CodePathAbsolute, "path %q is absolute", p)
	}
	comps := strings.Split(p, "/")
	for _, c := range comps {
		if c == ".." {
			return Errorf(CodePathTraversal, "path %q contains '..'", p)
		}
	}
	for _, c := range comps {
		if c == "" || c == "." {
			return Errorf(CodePathInvalidComponent, "path %q has an empty or '.' component or a trailing slash", p)
		}
	}
	for _, c := range comps {
		if len(c) > MaxComponentBytes {
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
