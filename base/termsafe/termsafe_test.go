package termsafe_test

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/dibs-gpu/dibs/base/termsafe"
)

// hostile is the process name from the report that retitled and cleared an
// admin's terminal.
const hostile = "\x1b]0;PWNED\x07\x1b[2J"

func TestString(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"ascii", "python train.py --lr 3e-4", "python train.py --lr 3e-4"},
		{"empty", "", ""},
		{"latin", "Müller's Übung, façade", "Müller's Übung, façade"},
		{"cjk", "训练 モデル 학습", "训练 モデル 학습"},
		{"emoji", "sweep 🚀🔥 ❤️", "sweep 🚀🔥 ❤️"},
		{"rtl letters", "שלום مرحبا", "שלום مرحبا"},
		{"osc title and clear", hostile, `\x1b]0;PWNED\x07\x1b[2J`},
		{"csi colour", "\x1b[31mred\x1b[0m", `\x1b[31mred\x1b[0m`},
		{"newline tab cr", "a\nb\tc\rd", `a\nb\tc\rd`},
		{"nul del", "a\x00b\x7f", `a\x00b\x7f`},
		{"c1 csi", "a\u009b2Jb", `a\u009b2Jb`},
		{"c1 osc", "\u009d0;x\u009c", `\u009d0;x\u009c`},
		{"invalid utf8", "ok\xff\xfe end", `ok\xff\xfe end`},
		{"truncated rune", "ab\xe2\x80", `ab\xe2\x80`},
		{"rlo", "note \u202etxt.exe", `note \u202etxt.exe`},
		{"every bidi", "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069", `\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069`},
		{"zero width", "a\u200bb\u200cc\u200dd\u2060e\ufeff", `a\u200bb\u200cc\u200dd\u2060e\ufeff`},
		{"invisible math", "\u2061\u2062\u2063\u2064", `\u2061\u2062\u2063\u2064`},
		{"soft hyphen", "co\u00adop", `co\u00adop`},
		{"separators", "a\u2028b\u2029c", `a\u2028b\u2029c`},
		{"hangul filler", "\u3164", `\u3164`},
		{"tag characters", "x\U000e0041\U000e007f", `x\U000e0041\U000e007f`},
		{"already escaped", `\x1b[2J`, `\x1b[2J`},
		{"nbsp kept", "a\u00a0b", "a\u00a0b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := termsafe.String(tt.in)
			if got != tt.want {
				t.Errorf("String(%q) = %q, want %q", tt.in, got, tt.want)
			}
			if clean := termsafe.Clean(tt.in); clean != (tt.in == tt.want) {
				t.Errorf("Clean(%q) = %v, want %v", tt.in, clean, tt.in == tt.want)
			}
			if err := termsafe.Check(tt.in); (err == nil) != (tt.in == tt.want) {
				t.Errorf("Check(%q) = %v, want an error: %v", tt.in, err, tt.in != tt.want)
			}
		})
	}
}

func TestCheckMessage(t *testing.T) {
	tests := []struct {
		in   string
		want string
	}{
		{"fix \u202eabc", "U+202E RIGHT-TO-LEFT OVERRIDE (a bidi control, which reorders text on screen) at byte 4"},
		{"a\u200bb", "U+200B ZERO WIDTH SPACE (an invisible character) at byte 1"},
		{hostile, "U+001B ESCAPE (a control character that starts terminal escape sequences) at byte 0"},
		{"x\u009b", "U+009B CONTROL SEQUENCE INTRODUCER (a control character that starts terminal escape sequences) at byte 1"},
		{"ab\xff", "byte 0xff (not UTF-8) at byte 2"},
		{"\x01", "U+0001 (a control character) at byte 0"},
		{"\u0600", "U+0600 (an invisible formatting character) at byte 0"},
	}
	for _, tt := range tests {
		err := termsafe.Check(tt.in)
		var e *termsafe.Error
		if !errors.As(err, &e) {
			t.Fatalf("Check(%q) = %v, want a *termsafe.Error", tt.in, err)
		}
		if err.Error() != tt.want {
			t.Errorf("Check(%q) = %q, want %q", tt.in, err.Error(), tt.want)
		}
	}
}

func TestCleanDoesNotAllocate(t *testing.T) {
	for _, s := range []string{"alice training resnet50 on imagenet", "训练 モデル 🚀 Müller"} {
		if n := testing.AllocsPerRun(100, func() { _ = termsafe.String(s) }); n != 0 {
			t.Errorf("String(%q) allocates %v times; clean text must come back as is", s, n)
		}
		if n := testing.AllocsPerRun(100, func() { _ = termsafe.Check(s) }); n != 0 {
			t.Errorf("Check(%q) allocates %v times", s, n)
		}
	}
}

// TestJSON: what encoding/json writes raw (DEL, C1, bidi, zero-width) comes
// out as \u escapes; the JSON still decodes to the original; control
// characters and line separators were already escaped by encoding/json.
func TestJSON(t *testing.T) {
	v := map[string]string{
		"command": hostile,
		"note":    "a\u202eb\u200bc\u2028d\u2029e\x7f\u009b\U000e0041",
		"plain":   "训练 🚀",
	}
	raw, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range []rune{0x1b, 0x07, 0x2028, 0x2029} {
		if strings.ContainsRune(string(raw), r) {
			t.Errorf("encoding/json wrote U+%04X raw; dibs relies on it escaping it", r)
		}
	}
	got := termsafe.JSON(raw)
	for _, r := range string(got) {
		if r != '\n' && !termsafe.Clean(string(r)) {
			t.Errorf("termsafe.JSON left U+%04X raw in %s", r, got)
		}
	}
	for _, want := range []string{`\u202e`, `\u200b`, `\u007f`, `\u009b`, `\udb40\udc41`, "训练 🚀"} {
		if !strings.Contains(string(got), want) {
			t.Errorf("termsafe.JSON output lacks %s:\n%s", want, got)
		}
	}
	var back map[string]string
	if err := json.Unmarshal(got, &back); err != nil {
		t.Fatalf("termsafe.JSON output does not decode: %v\n%s", err, got)
	}
	for k := range v {
		if back[k] != v[k] {
			t.Errorf("%s decodes as %q, want %q", k, back[k], v[k])
		}
	}
	plain, _ := json.Marshal(map[string]string{"a": "b c"})
	if got := termsafe.JSON(plain); &got[0] != &plain[0] {
		t.Error("termsafe.JSON copied JSON that needed no change")
	}
}

// independentlyUnsafe is the property's own statement of what may not reach
// a terminal, written from the Unicode categories rather than from the
// package's code.
func independentlyUnsafe(r rune) bool {
	return unicode.IsControl(r) || unicode.Is(unicode.Cf, r) || unicode.In(r, unicode.Zl, unicode.Zp) ||
		r >= 0x202a && r <= 0x202e || r >= 0x2066 && r <= 0x2069 || r >= 0x200b && r <= 0x200f ||
		r >= 0x2060 && r <= 0x2064 || r == 0xfeff || r == 0x061c
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"", "plain", hostile, "a\u202eb", "\u200b", "\xff", "\xe2\x80\xae", "训练 🚀", `\x1b`, "\u009b[2J", "\U000e0041"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		out := termsafe.String(s)
		if !utf8.ValidString(out) {
			t.Fatalf("String(%q) = %q is not UTF-8", s, out)
		}
		for _, r := range out {
			if independentlyUnsafe(r) {
				t.Fatalf("String(%q) = %q keeps U+%04X", s, out, r)
			}
		}
		if again := termsafe.String(out); again != out {
			t.Fatalf("String is not idempotent: %q, then %q", out, again)
		}
		if !termsafe.Clean(out) || termsafe.Check(out) != nil {
			t.Fatalf("String(%q) = %q is not clean", s, out)
		}
		if (out == s) != termsafe.Clean(s) || (out == s) != (termsafe.Check(s) == nil) {
			t.Fatalf("Clean/Check disagree with String on %q", s)
		}
	})
}

func FuzzJSON(f *testing.F) {
	for _, s := range []string{"", hostile, "a\u202eb\u2028", "\x7f\u0085\u009b", "\xff", "🚀\U000e0041"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		raw, err := json.Marshal(map[string]string{"s": s})
		if err != nil {
			t.Skip()
		}
		got := termsafe.JSON(raw)
		for _, r := range string(got) {
			if independentlyUnsafe(r) {
				t.Fatalf("JSON(%s) = %s keeps U+%04X", raw, got, r)
			}
		}
		var want, back map[string]string
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(got, &back); err != nil {
			t.Fatalf("JSON(%s) = %s does not decode: %v", raw, got, err)
		}
		if back["s"] != want["s"] {
			t.Fatalf("JSON changed the value: %q, want %q", back["s"], want["s"])
		}
	})
}

func BenchmarkString(b *testing.B) {
	for _, bc := range []struct{ name, s string }{
		{"ascii", "python train.py --config configs/resnet50.yaml"},
		{"cjk-emoji", "训练 モデル 학습 🚀 Müller façade"},
		{"hostile", hostile + " and \u202erlo\u200b"},
	} {
		b.Run(bc.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(int64(len(bc.s)))
			for b.Loop() {
				_ = termsafe.String(bc.s)
			}
		})
	}
}

// TestOneLineKeepsAFileLineWhole: what would break a comment line of an
// sbatch script or a YAML manifest (a newline, a carriage return, NEL, the
// line and paragraph separators) and other controls become spaces; the
// rest, an escape's visible part included, stays as it was.
func TestOneLineKeepsAFileLineWhole(t *testing.T) {
	in := "a\nb\r\x1b[31mc\u0085d\u2028e\u2029f\x7fg ☃"
	if got, want := termsafe.OneLine(in), "a b  [31mc d e f g ☃"; got != want {
		t.Errorf("OneLine(%q) = %q, want %q", in, got, want)
	}
}
