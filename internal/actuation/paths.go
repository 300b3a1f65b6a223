package actuation

import (
	"strings"
	"unicode/utf8"
)

// Bounds of a root-relative path.
const (
	MaxPathBytes          = 4096
	MaxPathComponentBytes = 255
	MaxRootNameBytes      = 63
)

// ValidateRelativePath checks the syntax of a root-relative path (seed 000 §6:
// the host canonicalizes root/ref + relative/path before every access).
//
// The empty path names the root itself: it is valid when requireFile is false
// and refused with path-empty when a file is required. Otherwise the first
// failing rule, in this order, decides the code:
//
//  1. backslash, NUL, ASCII control (0x00-0x1F, 0x7F), C1 control
//     (U+0080-U+009F) or invalid UTF-8: path-invalid-character;
//  2. longer than MaxPathBytes: path-too-long;
//  3. a leading "/": path-absolute;
//  4. a ".." component anywhere: path-traversal;
//  5. an empty component ("a//b", trailing "/") or a "." component:
//     path-invalid-component;
//  6. a component longer than MaxPathComponentBytes: path-too-long.
//
// An accepted non-empty path is its own path.Clean form. This is syntax only:
// symlink escape is refused at access time by resolving beneath the root
// (openat2 RESOLVE_BENEATH on Linux), reported as symlink-escape.
func ValidateRelativePath(p string, requireFile bool) *Refusal {
	const field = "path"
	if p == "" {
		if requireFile {
			return Refuse(CodePathEmpty, field, "must name a file beneath the root, not the root itself")
		}
		return nil
	}
	if r := checkPathCharacters(p, field); r != nil {
		return r
	}
	if len(p) > MaxPathBytes {
		return Refuse(CodePathTooLong, field, "must not be longer than %d bytes (got %d)", MaxPathBytes, len(p))
	}
	if p[0] == '/' {
		return Refuse(CodePathAbsolute, field, "must be relative to the root, not absolute")
	}
	components := strings.Split(p, "/")
	for _, c := range components {
		if c == ".." {
			return Refuse(CodePathTraversal, field, "must not contain a \"..\" component")
		}
	}
	for i, c := range components {
		switch {
		case c == "" && i == len(components)-1:
			return Refuse(CodePathInvalidComponent, field, "must not end with a slash")
		case c == "":
			return Refuse(CodePathInvalidComponent, field, "must not contain an empty component")
		case c == ".":
			return Refuse(CodePathInvalidComponent, field, "must not contain a \".\" component")
		}
	}
	for _, c := range components {
		if len(c) > MaxPathComponentBytes {
			return Refuse(CodePathTooLong, field, "must not contain a component longer than %d bytes", MaxPathComponentBytes)
		}
	}
	return nil
}

// checkPathCharacters refuses bytes that have no place in a portable path
// name or that could confuse a terminal, a log or another platform.
func checkPathCharacters(p, field string) *Refusal {
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRuneInString(p[i:])
		switch {
		case r == utf8.RuneError && size <= 1:
			return Refuse(CodePathInvalidCharacter, field, "must be valid UTF-8 (invalid byte at offset %d)", i)
		case r == 0:
			return Refuse(CodePathInvalidCharacter, field, "must not contain NUL (offset %d)", i)
		case r == '\\':
			return Refuse(CodePathInvalidCharacter, field, "must not contain a backslash (offset %d)", i)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f):
			return Refuse(CodePathInvalidCharacter, field, "must not contain control character U+%04X (offset %d)", r, i)
		}
		i += size
	}
	return nil
}

// SplitRelativePath returns the components of a valid relative path, or nil
// for "" (the root itself). It does not validate; call ValidateRelativePath
// first.
func SplitRelativePath(p string) []string {
	if p == "" {
		return nil
	}
	return strings.Split(p, "/")
}

// ValidateRootName checks a workspace root name: a DNS-1123 label (lower-case
// alphanumerics and '-', starting and ending alphanumeric, at most 63 bytes).
// Root names are references, never host paths. The refusal code is
// profile-invalid; callers outside a profile may re-code it.
func ValidateRootName(name string) *Refusal {
	if !isDNS1123Label(name) {
		return Refuse(CodeProfileInvalid, "", "root name %q must be a DNS-1123 label (lower-case alphanumerics and '-', at most %d bytes)", truncateForMessage(name), MaxRootNameBytes)
	}
	return nil
}

func isDNS1123Label(s string) bool {
	if len(s) == 0 || len(s) > MaxRootNameBytes {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
		if alnum {
			continue
		}
		if c == '-' && i != 0 && i != len(s)-1 {
			continue
		}
		return false
	}
	return true
}

// truncateForMessage bounds untrusted text quoted in refusal messages.
func truncateForMessage(s string) string {
	const max = 64
	if len(s) <= max {
		return s
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
