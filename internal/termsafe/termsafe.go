// Package termsafe is the one place where a string someone else chose is made safe to print
// on an operator's terminal (issue 25 item 6). Every printer of the CLI — `consent ls`,
// `run`'s consent prompt, `events`, `screen`, view frames, object names and reasons — goes
// through it, so no argv atom, reason, name or terminal line can carry a control byte or a
// terminal sequence (C0 and C1 controls, ESC and with it CSI, OSC, DCS, APC, PM, SOS; the
// 8-bit CSI 0x9b; DEL; Unicode format characters such as bidirectional overrides; invalid
// UTF-8) to the operator's terminal. What it escapes it writes as Go escapes (\x1b, \u009b,
// \x9b for an invalid byte, \n), so the operator sees exactly which bytes were sent.
//
// Printable characters of any script pass unchanged: the check is "printable", never a
// list of known-bad sequences, so a sequence nobody listed is escaped too.
package termsafe

import (
	"io"
	"strconv"
	"strings"
	"unicode/utf16"
	"unicode/utf8"
)

// Line returns s for one line of output: every rune that is not printable (strconv.IsPrint:
// letters, marks, numbers, punctuation, symbols and the ASCII space) is escaped, including
// newlines and tabs, and so is every byte that is not valid UTF-8.
func Line(s string) string { return escape(s, false) }

// Text returns s for multi-line output (a terminal's output, screen lines): like Line, but
// newlines and tabs are kept, and a CRLF line end prints as a newline. A lone carriage
// return is escaped — it would let the text overwrite what was printed before it.
func Text(s string) string { return escape(s, true) }

// Atom returns one argv atom (or another token printed among tokens separated by spaces)
// so that it reads as exactly one token: unchanged when it is non-empty and holds only
// printable characters other than space, quotes and backslash; otherwise Go-quoted, which
// escapes everything Line escapes plus the quote and the backslash. `rm "a b"` is one
// atom, `rm a b` two, and `"\x1b[2J"` is the atom holding ESC [ 2 J.
func Atom(s string) string {
	if plainAtom(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 2)
	b.WriteByte('"')
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case r == '"' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			b.WriteString(runeEscape(r))
		}
		i += size
	}
	b.WriteByte('"')
	return b.String()
}

// Argv returns atoms as one line, each through Atom, separated by single spaces.
func Argv(atoms []string) string {
	parts := make([]string, len(atoms))
	for i, a := range atoms {
		parts[i] = Atom(a)
	}
	return strings.Join(parts, " ")
}

func plainAtom(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if (r == utf8.RuneError && size == 1) || r == ' ' || r == '"' || r == '\'' || r == '\\' || !strconv.IsPrint(r) {
			return false
		}
		i += size
	}
	return true
}

func escape(s string, multiline bool) string {
	if safe(s, multiline) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b.WriteString(`\x`)
			b.WriteString(hex2(s[i]))
		case multiline && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case multiline && r == '\r' && i+1 < len(s) && s[i+1] == '\n':
			// CRLF prints as the newline that follows it
		case strconv.IsPrint(r):
			b.WriteString(s[i : i+size])
		default:
			b.WriteString(runeEscape(r))
		}
		i += size
	}
	return b.String()
}

// safe reports a string escape would return unchanged (the common case, no allocation).
func safe(s string, multiline bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c >= utf8.RuneSelf {
			return safeSlow(s[i:], multiline)
		}
		if c < 0x20 || c == 0x7f {
			if !multiline || (c != '\n' && c != '\t') {
				return false
			}
		}
	}
	return true
}

func safeSlow(s string, multiline bool) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return false
		}
		if !strconv.IsPrint(r) && (!multiline || (r != '\n' && r != '\t')) {
			return false
		}
		i += size
	}
	return true
}

// runeEscape is the Go escape of a valid rune that is not printable: \n, \t, \x1b, \u009b,
// \u202e, \U000e0001.
func runeEscape(r rune) string {
	q := strconv.QuoteRuneToASCII(r)
	return q[1 : len(q)-1]
}

func hex2(c byte) string {
	const digits = "0123456789abcdef"
	return string([]byte{digits[c>>4], digits[c&0xf]})
}

// JSON returns encoded JSON (what encoding/json writes) with every non-ASCII rune that is
// not printable — C1 controls such as the 8-bit CSI U+009B, format characters such as
// bidirectional overrides — and DEL written as \u escapes. The value is the same; the
// encoder itself escapes only the C0 controls. Outside strings JSON is ASCII, so only
// string contents change.
func JSON(b []byte) []byte {
	clean := true
	for i := 0; i < len(b); i++ {
		if b[i] >= 0x7f {
			clean = false
			break
		}
	}
	if clean {
		return b
	}
	out := make([]byte, 0, len(b)+16)
	for i := 0; i < len(b); {
		if b[i] < 0x7f {
			out = append(out, b[i])
			i++
			continue
		}
		r, size := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			out = append(out, `\ufffd`...)
		case r != 0x7f && strconv.IsPrint(r):
			out = append(out, b[i:i+size]...)
		case r > 0xffff:
			r1, r2 := utf16.EncodeRune(r)
			out = append(out, []byte(`\u`+hex4(r1)+`\u`+hex4(r2))...)
		default:
			out = append(out, []byte(`\u`+hex4(r))...)
		}
		i += size
	}
	return out
}

func hex4(r rune) string {
	return hex2(byte(r>>8)) + hex2(byte(r))
}

// Writer escapes, through Text, what a human-readable printer writes to W: a printer built
// from Fprintf calls over object fields never emits a terminal sequence, whatever the
// fields hold. Each Write is escaped on its own (Fprintf writes whole lines or cells).
type Writer struct{ W io.Writer }

// Write implements io.Writer; it reports len(p) when W took the escaped bytes.
func (w Writer) Write(p []byte) (int, error) {
	if _, err := io.WriteString(w.W, Text(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
