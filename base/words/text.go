package words

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/termsafe"
)

// CheckNote keeps notes to one short line of plain text: everyone's board
// and `dibs ls` print them, so an escape sequence, a bidi override or a
// zero-width character in a note would reach (or mislead) other people's
// terminals. A note is refused rather than escaped: the person typing it is
// there to fix it.
func CheckNote(note string) error {
	if len(note) > MaxNoteLen {
		return refusal.Invalidf("note is %d bytes; keep it to %d at most", len(note), MaxNoteLen)
	}
	if strings.ContainsAny(note, "\n\r") {
		return refusal.Invalidf("note must be one line")
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
		return refusal.Invalidf("%s holds %v: remove it; a %s must be plain text", what, err, what)
	}
	return nil
}

// MaxNoteLen bounds a lease note so it fits the board and the gossip wire.
const MaxNoteLen = 200

// TextChecker keeps the first field that fails termsafe.Check (in Err),
// skipping the fields in Skip. A lease and a queue entry check their text
// with it.
type TextChecker struct {
	Skip []string
	Err  error
}

// Check is the visitor EachString calls: it checks one field's text.
func (c *TextChecker) Check(field string, p *string) {
	if c.Err != nil || slices.Contains(c.Skip, field) {
		return
	}
	if e := termsafe.Check(*p); e != nil {
		c.Err = fmt.Errorf("its %s holds %w", field, e)
	}
}
