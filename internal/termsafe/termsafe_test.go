package termsafe

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// hostile are strings an attacker would put in an argv atom, a reason or a name: each would
// move the cursor, clear the screen, set the clipboard, retitle the window, start a device
// control string or hide text, were it printed raw.
var hostile = []string{
	"\x1b]52;c;ZWNobyBwd25lZA==\x07", // OSC 52: write the operator's clipboard
	"\x1b]0;innocent title\x1b\\",    // OSC 0 ended by ST
	"\x1b[2J\x1b[H",                  // CSI: clear the screen, cursor home
	"\x9b2J",                         // 8-bit CSI as a raw byte (invalid UTF-8)
	"\u009b2J",                       // 8-bit CSI as a UTF-8 encoded C1 control
	"\u009d0;title\u009c",            // 8-bit OSC ... ST
	"\x1bP+q544e\x1b\\",              // DCS (XTGETTCAP)
	"\x90q\x9c",                      // 8-bit DCS ... ST as raw bytes
	"\x1b_apc\x1b\\",                 // APC
	"ok\rrm -rf /",                   // carriage return overwriting the line
	"a\bb\x7f",                       // backspace, DEL
	"evil\u202egnp.exe",              // right-to-left override
	"\x00nul",
}

// TestNoControlSurvives: whatever the function, no hostile string keeps an ESC, a C0/C1
// control (other than the newline and tab Text keeps), DEL, a format character or an
// invalid byte.
func TestNoControlSurvives(t *testing.T) {
	for _, h := range hostile {
		for name, f := range map[string]func(string) string{"Line": Line, "Text": Text, "Atom": Atom} {
			got := f(h)
			if !utf8.ValidString(got) {
				t.Errorf("%s(%q) = %q: not valid UTF-8", name, h, got)
			}
			for _, r := range got {
				bad := r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0x202e
				if name == "Text" && (r == '\n' || r == '\t') {
					bad = false
				}
				if bad {
					t.Errorf("%s(%q) = %q keeps %U", name, h, got, r)
				}
			}
		}
	}
}

func TestEscapes(t *testing.T) {
	for _, c := range []struct{ in, line, text, atom string }{
		{"plain", "plain", "plain", "plain"},
		{"héllo 世界", "héllo 世界", "héllo 世界", `"héllo 世界"`},
		{"\x1b[2J", `\x1b[2J`, `\x1b[2J`, `"\x1b[2J"`},
		{"\x9b2J", `\x9b2J`, `\x9b2J`, `"\x9b2J"`},
		{"\u009b2J", `\u009b2J`, `\u009b2J`, `"\u009b2J"`},
		{"a\r\nb", `a\r\nb`, "a\nb", `"a\r\nb"`},
		{"a\rb", `a\rb`, `a\rb`, `"a\rb"`},
		{"a\tb", `a\tb`, "a\tb", `"a\tb"`},
		{`say "hi" \o/`, `say "hi" \o/`, `say "hi" \o/`, `"say \"hi\" \\o/"`},
		{"", "", "", `""`},
		{"--flag=x", "--flag=x", "--flag=x", "--flag=x"},
	} {
		if got := Line(c.in); got != c.line {
			t.Errorf("Line(%q) = %q, want %q", c.in, got, c.line)
		}
		if got := Text(c.in); got != c.text {
			t.Errorf("Text(%q) = %q, want %q", c.in, got, c.text)
		}
		if got := Atom(c.in); got != c.atom {
			t.Errorf("Atom(%q) = %q, want %q", c.in, got, c.atom)
		}
	}
}

// TestArgvAtomsStayAtoms: every atom, not only argv[0], is escaped, and atoms holding a
// space stay one token.
func TestArgvAtomsStayAtoms(t *testing.T) {
	got := Argv([]string{"/usr/bin/git", "log", "\x1b]52;c;cHduZWQ=\x07", "a b", "\x9b2J"})
	want := `/usr/bin/git log "\x1b]52;c;cHduZWQ=\a" "a b" "\x9b2J"`
	if got != want {
		t.Fatalf("Argv = %q, want %q", got, want)
	}
	if strings.ContainsAny(got, "\x1b\x07") {
		t.Fatalf("Argv kept a control byte: %q", got)
	}
}

func FuzzNoControlSurvives(f *testing.F) {
	for _, h := range hostile {
		f.Add(h)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, got := range []string{Line(s), Atom(s), Text(s)} {
			if !utf8.ValidString(got) {
				t.Fatalf("%q escaped to invalid UTF-8 %q", s, got)
			}
			for _, r := range got {
				if (r < 0x20 && r != '\n' && r != '\t') || (r >= 0x7f && r <= 0x9f) {
					t.Fatalf("%q escaped to %q keeping %U", s, got, r)
				}
			}
		}
		if l := Line(s); strings.ContainsAny(l, "\n\t") {
			t.Fatalf("Line(%q) = %q keeps a newline or tab", s, l)
		}
	})
}

// TestJSONSameValue: JSON escapes C1 controls, format characters and DEL inside strings,
// and the value decodes to the same string.
func TestJSONSameValue(t *testing.T) {
	for _, h := range append(hostile[:len(hostile):len(hostile)], "plain", "héllo 世界", "\U000e0041tag") {
		raw, err := json.Marshal(map[string]string{"argv": h})
		if err != nil {
			t.Fatal(err)
		}
		got := JSON(raw)
		for _, r := range string(got) {
			if r < 0x20 || (r >= 0x7f && r <= 0x9f) || r == 0x202e || r == 0xe0041 {
				t.Errorf("JSON(%q) = %q keeps %U", raw, got, r)
			}
		}
		var back map[string]string
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("JSON(%q) = %q is not JSON: %v", raw, got, err)
		}
		var want map[string]string
		_ = json.Unmarshal(raw, &want)
		if back["argv"] != want["argv"] {
			t.Errorf("JSON changed the value: %q, want %q", back["argv"], want["argv"])
		}
	}
}
