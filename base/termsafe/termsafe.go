// Package termsafe makes text that came from outside safe to show in a
// terminal. dibs prints strings that other people control: process names
// from /proc (anyone can name a process), lease notes, user and host names,
// GPU model and driver strings, and errors from other nodes. Printed raw, a
// process named "\x1b]0;PWNED\x07\x1b[2J" retitles and clears the reader's
// terminal, and a note holding U+202E reverses what the board shows after it.
//
// String replaces every such character with a visible escape (`\x1b`,
// `\u202e`), so the reader sees that something odd was there; Check and Clean
// let validators refuse such text where a person typed it. The package is a
// leaf (standard library only) so every layer from lease up can use the one
// rule.
package termsafe

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"unicode"
	"unicode/utf8"
)

const hexDigits = "0123456789abcdef"

// unsafeRune reports whether r must not reach a terminal as itself: C0 and
// C1 controls and DEL (escape sequences, bells, cursor moves), every Unicode
// format character (bidi controls, zero-width characters, the soft hyphen,
// invisible tags, the byte-order mark), line and paragraph separators, and
// the invisible Hangul fillers that spoof blank names.
func unsafeRune(r rune) bool {
	switch {
	case r < 0x20 || r == 0x7f:
		return true
	case r < 0xa0:
		return r >= 0x80
	case r == 0xad:
		return true
	case r < 0x600, r >= 0x4e00 && r < 0xa000, r >= 0xac00 && r < 0xd7a4, r >= 0x1f000 && r < 0xe0000:
		// Latin, Greek, Cyrillic, Hebrew; CJK ideographs; Hangul syllables;
		// emoji and the supplementary ideographs: the bulk of text, and no
		// format character among them.
		return false
	case r == 0x2028, r == 0x2029, r == 0x115f, r == 0x1160, r == 0x3164, r == 0xffa0:
		return true
	}
	return unicode.Is(unicode.Cf, r)
}

// Clean reports whether s is valid UTF-8 with nothing String would change.
// It does not allocate.
func Clean(s string) bool {
	return firstUnsafe(s) < 0
}

// firstUnsafe is the byte offset of the first invalid byte or unsafe rune in
// s, or -1.
func firstUnsafe(s string) int {
	for i := 0; i < len(s); {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				return i
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n == 1 || unsafeRune(r) {
			return i
		}
		i += n
	}
	return -1
}

// String returns s as a terminal may show it: every control character,
// bidi control, zero-width or other invisible formatting character, line or
// paragraph separator and byte that is not UTF-8 is replaced by a visible
// escape: \n, \r, \t for those three, \x1b for other ASCII controls and
// stray bytes, \u009b or \u202e for other runes (\U000e0041 above U+FFFF).
// Everything else, including non-Latin letters, CJK and emoji, is kept.
// String(s) is s itself, without allocating, when s is clean, and String is
// idempotent: its result is always clean. A backslash is not escaped, so a
// string that already reads `\x1b` stays as it is.
func String(s string) string {
	i := firstUnsafe(s)
	if i < 0 {
		return s
	}
	var sb strings.Builder
	sb.Grow(len(s) + 32)
	sb.WriteString(s[:i])
	var buf [10]byte
	for i < len(s) {
		c := s[i]
		if c < utf8.RuneSelf {
			if c < 0x20 || c == 0x7f {
				sb.Write(appendEscapeASCII(buf[:0], c))
			} else {
				sb.WriteByte(c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			sb.Write(append(buf[:0], '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf]))
		case unsafeRune(r):
			sb.Write(appendEscapeRune(buf[:0], r))
		default:
			sb.WriteString(s[i : i+n])
		}
		i += n
	}
	return sb.String()
}

func appendEscapeASCII(b []byte, c byte) []byte {
	switch c {
	case '\n':
		return append(b, '\\', 'n')
	case '\r':
		return append(b, '\\', 'r')
	case '\t':
		return append(b, '\\', 't')
	}
	return append(b, '\\', 'x', hexDigits[c>>4], hexDigits[c&0xf])
}

func appendEscapeRune(b []byte, r rune) []byte {
	if r > 0xffff {
		b = append(b, '\\', 'U')
		for shift := 28; shift >= 0; shift -= 4 {
			b = append(b, hexDigits[(r>>shift)&0xf])
		}
		return b
	}
	return append(b, '\\', 'u', hexDigits[(r>>12)&0xf], hexDigits[(r>>8)&0xf], hexDigits[(r>>4)&0xf], hexDigits[r&0xf])
}

// Error says what Check found and where, so a validator can tell a person
// exactly what to remove.
type Error struct {
	// Offset is the byte offset of the character in the checked string.
	Offset int
	// Rune is the character; utf8.RuneError when Invalid.
	Rune rune
	// Invalid marks a byte that is not UTF-8; Byte holds it.
	Invalid bool
	Byte    byte
}

// Error names the character, says why it is refused and where it is: "U+202E
// RIGHT-TO-LEFT OVERRIDE (a bidi control, which reorders text on screen) at
// byte 5".
func (e *Error) Error() string {
	if e.Invalid {
		return fmt.Sprintf("byte 0x%02x (not UTF-8) at byte %d", e.Byte, e.Offset)
	}
	name, why := describe(e.Rune)
	if name != "" {
		name = " " + name
	}
	return fmt.Sprintf("U+%04X%s (%s) at byte %d", e.Rune, name, why, e.Offset)
}

// OneLine keeps text from outside on one line of a file dibs writes (a
// comment in an sbatch script or a Kubernetes manifest): every control
// character and every line separator becomes a space, since a line break
// would end the comment and start a command or a key. Unlike String it
// escapes nothing: the text is for a file, not a terminal.
func OneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f || r == 0x85 || r == 0x2028 || r == 0x2029 {
			return ' '
		}
		return r
	}, s)
}

// Check returns nil when s is clean (see Clean), else an *Error for the first
// character String would escape. Validators of what people type (notes,
// names) use it to refuse rather than escape.
func Check(s string) error {
	i := firstUnsafe(s)
	if i < 0 {
		return nil
	}
	r, n := utf8.DecodeRuneInString(s[i:])
	if r == utf8.RuneError && n == 1 {
		return &Error{Offset: i, Rune: r, Invalid: true, Byte: s[i]}
	}
	return &Error{Offset: i, Rune: r}
}

// describe names a refused rune (when it is one people meet) and says why it
// is refused.
func describe(r rune) (name, why string) {
	if k, ok := known[r]; ok {
		return k.name, k.why
	}
	if r < 0x20 || r >= 0x7f && r < 0xa0 {
		return "", whyControl
	}
	return "", "an invisible formatting character"
}

const (
	whyControl   = "a control character"
	whyEscape    = "a control character that starts terminal escape sequences"
	whyLine      = "a line break"
	whyBidi      = "a bidi control, which reorders text on screen"
	whyInvisible = "an invisible character"
)

// known are the refused runes people meet, by name. Read-only.
var known = map[rune]struct{ name, why string }{
	0x07:   {"BELL", whyControl},
	0x0a:   {"LINE FEED", whyLine},
	0x0b:   {"LINE TABULATION", whyLine},
	0x0c:   {"FORM FEED", whyLine},
	0x0d:   {"CARRIAGE RETURN", whyLine},
	0x1b:   {"ESCAPE", whyEscape},
	0x7f:   {"DELETE", whyControl},
	0x85:   {"NEXT LINE", whyLine},
	0x90:   {"DEVICE CONTROL STRING", whyEscape},
	0x9b:   {"CONTROL SEQUENCE INTRODUCER", whyEscape},
	0x9d:   {"OPERATING SYSTEM COMMAND", whyEscape},
	0x2028: {"LINE SEPARATOR", whyLine},
	0x2029: {"PARAGRAPH SEPARATOR", whyLine},
	0x061c: {"ARABIC LETTER MARK", whyBidi},
	0x200e: {"LEFT-TO-RIGHT MARK", whyBidi},
	0x200f: {"RIGHT-TO-LEFT MARK", whyBidi},
	0x202a: {"LEFT-TO-RIGHT EMBEDDING", whyBidi},
	0x202b: {"RIGHT-TO-LEFT EMBEDDING", whyBidi},
	0x202c: {"POP DIRECTIONAL FORMATTING", whyBidi},
	0x202d: {"LEFT-TO-RIGHT OVERRIDE", whyBidi},
	0x202e: {"RIGHT-TO-LEFT OVERRIDE", whyBidi},
	0x2066: {"LEFT-TO-RIGHT ISOLATE", whyBidi},
	0x2067: {"RIGHT-TO-LEFT ISOLATE", whyBidi},
	0x2068: {"FIRST STRONG ISOLATE", whyBidi},
	0x2069: {"POP DIRECTIONAL ISOLATE", whyBidi},
	0x00ad: {"SOFT HYPHEN", whyInvisible},
	0x200b: {"ZERO WIDTH SPACE", whyInvisible},
	0x200c: {"ZERO WIDTH NON-JOINER", whyInvisible},
	0x200d: {"ZERO WIDTH JOINER", whyInvisible},
	0x2060: {"WORD JOINER", whyInvisible},
	0x2061: {"FUNCTION APPLICATION", whyInvisible},
	0x2062: {"INVISIBLE TIMES", whyInvisible},
	0x2063: {"INVISIBLE SEPARATOR", whyInvisible},
	0x2064: {"INVISIBLE PLUS", whyInvisible},
	0xfeff: {"ZERO WIDTH NO-BREAK SPACE", whyInvisible},
	0x115f: {"HANGUL CHOSEONG FILLER", whyInvisible},
	0x1160: {"HANGUL JUNGSEONG FILLER", whyInvisible},
	0x3164: {"HANGUL FILLER", whyInvisible},
	0xffa0: {"HALFWIDTH HANGUL FILLER", whyInvisible},
}

// JSON makes JSON text, as encoding/json writes it, safe for a terminal
// without changing what it decodes to. encoding/json already escapes C0
// controls and U+2028/U+2029, but writes DEL, C1 controls (U+009B starts an
// escape sequence on some terminals), bidi controls and zero-width
// characters as themselves; JSON writes each of them as a \uXXXX escape (a
// surrogate pair above U+FFFF). Newlines, tabs and carriage returns, which
// only appear between tokens, are kept; a byte that is not UTF-8 becomes
// \ufffd, as encoding/json would have written it. JSON returns b itself when
// nothing needs escaping.
func JSON(b []byte) []byte {
	first := -1
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\n' && c != '\r' && c != '\t' || c == 0x7f {
				first = i
				break
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		if r == utf8.RuneError && n == 1 || unsafeRune(r) {
			first = i
			break
		}
		i += n
	}
	if first < 0 {
		return b
	}
	out := make([]byte, 0, len(b)+32)
	out = append(out, b[:first]...)
	for i := first; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			if c < 0x20 && c != '\n' && c != '\r' && c != '\t' || c == 0x7f {
				out = appendJSONEscape(out, rune(c))
			} else {
				out = append(out, c)
			}
			i++
			continue
		}
		r, n := utf8.DecodeRune(b[i:])
		switch {
		case r == utf8.RuneError && n == 1:
			out = appendJSONEscape(out, utf8.RuneError)
		case unsafeRune(r):
			out = appendJSONEscape(out, r)
		default:
			out = append(out, b[i:i+n]...)
		}
		i += n
	}
	return out
}

func appendJSONEscape(b []byte, r rune) []byte {
	u4 := func(b []byte, v rune) []byte {
		return append(b, '\\', 'u', hexDigits[(v>>12)&0xf], hexDigits[(v>>8)&0xf], hexDigits[(v>>4)&0xf], hexDigits[v&0xf])
	}
	if r > 0xffff {
		r -= 0x10000
		return u4(u4(b, 0xd800+(r>>10)), 0xdc00+(r&0x3ff))
	}
	return u4(b, r)
}

// WriteJSON writes v to w as indented JSON with every string escaped as JSON
// escapes it: what dibs and dibsd print with --json for scripts, the same
// values, safe on a terminal too.
func WriteJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := w.Write(JSON(b.Bytes()))
	return err
}
