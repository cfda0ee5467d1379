package tui

import (
	"strings"
	"unicode"
)

// maxAlert bounds the text of a desktop notification.
const maxAlert = 200

// alertSequence is what the board writes to the terminal when a notice
// arrives: the bell, then the notice as a desktop notification in the two
// forms terminals take (OSC 9: iTerm2, Windows Terminal, kitty, WezTerm,
// foot; OSC 777: urxvt, VTE terminals, Ghostty, foot). A terminal that knows
// neither ignores them; over SSH they travel with the board to the person's
// own terminal.
func alertSequence(text string) string {
	t := alertText(text)
	return "\a\x1b]9;dibs: " + t + "\x07\x1b]777;notify;dibs;" + t + "\x07"
}

// alertText keeps a notice to one short line that cannot end the escape
// sequence early or start another: every control character (BEL, ESC, C1)
// and every invisible or bidi character becomes a space.
func alertText(s string) string {
	s = strings.Map(func(r rune) rune {
		if unicode.IsControl(r) || unicode.In(r, unicode.Cf, unicode.Zl, unicode.Zp) {
			return ' '
		}
		return r
	}, s)
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > maxAlert {
		s = string(r[:maxAlert-1]) + "…"
	}
	return s
}

// noticeText drops the time a board notice starts with ("16:04 ..."): a
// desktop notification carries its own.
func noticeText(n string) string {
	if len(n) > 6 && n[2] == ':' && n[5] == ' ' {
		return n[6:]
	}
	return n
}
