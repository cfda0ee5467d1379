package lease

import (
	"unicode/utf8"

	"github.com/dibs-gpu/dibs/base/words"
)

// clipNote cuts a note made by dibs to MaxNoteLen bytes on a rune boundary.
func clipNote(s string) string {
	if len(s) <= words.MaxNoteLen {
		return s
	}
	cut := words.MaxNoteLen - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
