package lease

import (
	"strings"
	"unicode/utf8"

	"github.com/dibs-gpu/dibs/internal/termsafe"
)

// CheckNote keeps notes to one short line of plain text: everyone's board
// and `dibs ls` print them, so an escape sequence, a bidi override or a
// zero-width character in a note would reach (or mislead) other people's
// terminals. A note is refused rather than escaped: the person typing it is
// there to fix it.
func CheckNote(note string) error {
	if len(note) > MaxNoteLen {
		return Invalidf("note is %d bytes; keep it to %d at most", len(note), MaxNoteLen)
	}
	if strings.ContainsAny(note, "\n\r") {
		return Invalidf("note must be one line")
	}
	return CheckText("note", note)
}

// CheckText refuses text a person typed (a note, a session name, a model)
// that holds anything termsafe would escape: control characters and escape
// sequences, bidi controls, zero-width and other invisible characters, bytes
// that are not UTF-8. The message names the character, where it is, and
// says to remove it. what names the field ("note").
func CheckText(what, s string) error {
	if err := termsafe.Check(s); err != nil {
		return Invalidf("%s holds %v: remove it; a %s must be plain text", what, err, what)
	}
	return nil
}

// clipNote cuts a note made by dibs to MaxNoteLen bytes on a rune boundary.
func clipNote(s string) string {
	if len(s) <= MaxNoteLen {
		return s
	}
	cut := MaxNoteLen - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
