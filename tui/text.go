package tui

import (
	"strings"

	"github.com/charmbracelet/x/ansi"
)

const blanks = "                                                                                                                                "

func spaces(n int) string {
	if n <= 0 {
		return ""
	}
	if n <= len(blanks) {
		return blanks[:n]
	}
	return strings.Repeat(" ", n)
}

// padRight pads s with spaces to width cells (ANSI-aware).
func padRight(s string, width int) string {
	return s + spaces(width-ansi.StringWidth(s))
}

// truncate cuts s to width cells (ANSI-aware), ending in "…" when cut.
func truncate(s string, width int) string {
	if width <= 0 {
		return ""
	}
	if ansi.StringWidth(s) <= width {
		return s
	}
	return ansi.Truncate(s, width, "…")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
