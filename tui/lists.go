package tui

import (
	"fmt"
	"strings"
	"time"

	"github.com/charmbracelet/x/ansi"
)

// listCursor is a cursor over the rows of a list view and the first row
// drawn.
type listCursor struct{ cur, top int }

func (l *listCursor) move(d, n int) {
	l.cur = min(max(l.cur+d, 0), max(n-1, 0))
}

// clamp keeps the cursor on a row after the list changed length.
func (l *listCursor) clamp(n int) { l.move(0, n) }

// window is the rows [from, to) that fit in h lines of rowH lines each,
// scrolled so the cursor's row shows.
func (l *listCursor) window(n, h, rowH int) (from, to int) {
	fit := max(h/max(rowH, 1), 1)
	if l.cur < l.top {
		l.top = l.cur
	}
	if l.cur >= l.top+fit {
		l.top = l.cur - fit + 1
	}
	l.top = min(l.top, max(n-fit, 0))
	return l.top, min(n, l.top+fit)
}

// fetchState is when a view last asked the agent, and whether it waits
// for an answer: a burst of board changes is one question.
type fetchState struct {
	at      time.Time
	loading bool
	err     error
}

// due reports whether a view should ask again: now (it was just opened,
// or an action changed what it shows), or when what it has is older than
// every.
func (f *fetchState) due(now bool, at time.Time, every time.Duration) bool {
	if f.loading {
		return false
	}
	return now || f.at.IsZero() || at.Sub(f.at) >= every
}

// listHeader is a list's title rule and its column line.
func (c *common) listHeader(title, cols string, w int) []string {
	return []string{c.titleRule(title, w), "  " + c.st.label.render(truncate(cols, w-2))}
}

// row draws one row of a list: a cursor mark, the text, cut to w.
func (c *common) row(text string, cur, mine bool, w int) string {
	mark := "  "
	switch {
	case cur && mine:
		mark = "▸★"
	case cur:
		mark = "▸ "
	case mine:
		mark = " ★"
	}
	line := truncate(mark+text, w)
	switch {
	case cur:
		return c.st.cellCur[kindMine].render(padRight(line, w))
	case mine:
		return c.st.cell[kindMine].render(line)
	}
	return line
}

// message is a dim line in a list's body: loading, empty, an error.
func (c *common) message(lines []string, text string, w int) []string {
	return append(lines, "", "  "+c.st.dim.render(truncate(text, w-2)))
}

// loadingText says what a view waits for, or why its answer is missing.
func (f *fetchState) loadingText(what string) string {
	if f.err != nil {
		return fmt.Sprintf("could not read %s: %s", what, errText(f.err))
	}
	return "asking the agent for " + what + "…"
}

// cols pads each field to its width and joins them: a table row.
func cols(widths []int, fields ...string) string {
	var b strings.Builder
	for i, f := range fields {
		if i > 0 {
			b.WriteByte(' ')
		}
		if i < len(widths) && widths[i] > 0 {
			f = truncate(f, widths[i])
			b.WriteString(f)
			b.WriteString(spaces(widths[i] - ansi.StringWidth(f)))
			continue
		}
		b.WriteString(f)
	}
	return b.String()
}
