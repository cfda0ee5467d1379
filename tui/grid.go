package tui

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/charmbracelet/x/ansi"

	"github.com/dibs-gpu/dibs/base/termsafe"
)

// Cell widths: 9 fits eight GPUs in 80 columns; wider cells show longer names.
const (
	minCell = 9
	maxCell = 14
)

// gridLayout is how the grid fits a width: cell width and cells per row.
type gridLayout struct{ cw, perRow int }

func (g *gridView) layout(w int) gridLayout {
	most := 1
	for i := range g.views {
		most = max(most, len(g.views[i].cells))
	}
	cw := min(max((w-1)/most, minCell), maxCell)
	per := max(1, (w-1)/cw)
	return gridLayout{cw: cw, perRow: min(per, most)}
}

func (l gridLayout) blockH(v *nodeView) int {
	rows := (len(v.cells) + l.perRow - 1) / l.perRow
	return 1 + 2*rows
}

// gridNeed is how many lines the whole grid takes at width w.
func (g *gridView) gridNeed(w int) int {
	if !g.ready || len(g.views) == 0 {
		return 2
	}
	l := g.layout(w)
	n := 1
	for i := range g.views {
		n += l.blockH(&g.views[i])
	}
	return n
}

// gridLines draws the ruler and as many node blocks as fit in h lines,
// scrolled so the cursor's node is whole. y0 is the screen line of the
// first, for mouse hits.
func (g *gridView) gridLines(w, h, y0 int) (lines []string, widths []int) {
	st := g.st
	msg := func(s string) ([]string, []int) {
		s = truncate(s, w-2)
		return []string{"", "  " + st.dim.render(s)}, []int{0, 2 + ansi.StringWidth(s)}
	}
	if !g.ready {
		return msg("waiting for the agent's board…")
	}
	if len(g.views) == 0 {
		text := "the agent reports no nodes"
		switch {
		case g.onlyMine && g.filter == "":
			text = "you hold no GPUs — m shows every node, c claims"
		case g.filter != "":
			text = fmt.Sprintf("no node, user or model matches “%s” — esc clears the filter", termsafe.String(g.filter))
		}
		return msg(text)
	}
	l := g.layout(w)
	// When not every node fits, the last line says how many more there are.
	limit := h
	if g.gridNeed(w) > h {
		g.scrollTo(l, h-1)
		if g.span(l, g.top, len(g.views)-1) > h-1 {
			limit = max(h-1, 2)
			g.scrollTo(l, limit-1)
		}
	}
	lines = make([]string, 1, h)
	widths = make([]int, 1, h)
	inner := l.cw - 2
	below := 0
	for i := g.top; i < len(g.views); i++ {
		v := &g.views[i]
		if len(lines) >= limit {
			below++
			continue
		}
		if len(lines)+l.blockH(v) > limit {
			below++ // drawn in part
		}
		g.hits = append(g.hits, hit{y: y0 + len(lines), h: 1, x0: 0, x1: w, node: i, col: -1})
		hl, hw := g.nodeHeader(v, i == g.curNode, w)
		lines, widths = append(lines, hl), append(widths, hw)
		for r := 0; r*l.perRow < len(v.cells) && len(lines) < limit; r++ {
			from, to := r*l.perRow, min((r+1)*l.perRow, len(v.cells))
			var a, b strings.Builder
			a.Grow(l.cw*(to-from)*3 + 64)
			b.Grow(l.cw*(to-from)*3 + 64)
			a.WriteByte(' ')
			b.WriteByte(' ')
			for j := from; j < to; j++ {
				c := &v.cells[j]
				isCur := i == g.curNode && j == g.curCol
				g.writeCell(&a, c, isCur, g.isSelected(v.name, c.gpu), inner)
				g.writeTelemetry(&b, c, inner)
				g.hits = append(g.hits, hit{y: y0 + len(lines), h: 2, x0: 1 + (j-from)*l.cw, x1: 1 + (j-from+1)*l.cw, node: i, col: j})
			}
			rw := 1 + (to-from)*l.cw
			la, lb := a.String(), b.String()
			if rw > w { // a terminal narrower than one cell
				la, lb, rw = truncate(la, w), truncate(lb, w), w
			}
			lines, widths = append(lines, la), append(widths, rw)
			if len(lines) < limit {
				lines, widths = append(lines, lb), append(widths, rw)
			}
		}
	}
	lines[0], widths[0] = g.ruler(l, w)
	if limit < h {
		for len(lines) < limit {
			lines, widths = append(lines, ""), append(widths, 0)
		}
		more := ""
		if below > 0 {
			more = truncate(fmt.Sprintf("  ▼ %d more %s below — j/↓ scrolls", below, plural(below, "node", "nodes")), w)
		}
		lines, widths = append(lines, g.st.dim.render(more)), append(widths, ansi.StringWidth(more))
	}
	return lines, widths
}

// scrollTo moves the first drawn node so the cursor's block fits in avail
// lines, and uses the space when the end of the list is reached.
func (g *gridView) scrollTo(l gridLayout, avail int) {
	g.top = min(max(g.top, 0), len(g.views)-1)
	if g.top > g.curNode {
		g.top = g.curNode
	}
	for g.top < g.curNode && g.span(l, g.top, g.curNode) > avail {
		g.top++
	}
	for g.top > 0 && g.span(l, g.top-1, len(g.views)-1) <= avail {
		g.top--
	}
}

// span is how many lines node blocks from..to take.
func (g *gridView) span(l gridLayout, from, to int) int {
	n := 0
	for i := from; i <= to; i++ {
		n += l.blockH(&g.views[i])
	}
	return n
}

func (g *gridView) ruler(l gridLayout, w int) (string, int) {
	st := g.st
	var b strings.Builder
	b.WriteByte(' ')
	split := slices.ContainsFunc(g.views, func(v nodeView) bool { return v.split })
	for c := 0; c < l.perRow && !split; c++ {
		b.WriteString(padRight(" "+strconv.Itoa(c), l.cw))
	}
	r := truncate(strings.TrimRight(b.String(), " "), w)
	out := st.dim.render(r)
	used := ansi.StringWidth(r)
	if g.top > 0 {
		info := fmt.Sprintf("▲ %d above ", g.top)
		iw := ansi.StringWidth(info)
		if used+iw+2 <= w {
			out += spaces(w-used-iw) + st.dim.render(info)
			used = w
		}
	}
	return out, used
}

func (g *gridView) nodeHeader(v *nodeView, isCur bool, w int) (string, int) {
	st := g.st
	var b strings.Builder
	used := 0
	if isCur {
		b.WriteString("▸ ")
		st.nodeNameCur.write(&b, v.name)
	} else {
		b.WriteString("  ")
		st.nodeName.write(&b, v.name)
	}
	used += 2 + ansi.StringWidth(v.name)
	b.WriteString("  ")
	sp := st.stateAlive
	switch v.state {
	case "alive":
	case "suspect", "restarting":
		// Away for a moment: its work holds for the grace.
		sp = st.stateSuspect
	default:
		sp = st.stateDown
	}
	sp.write(&b, v.state)
	used += 2 + ansi.StringWidth(v.state)
	model := fmt.Sprintf("  %s ×%d  ", v.model, v.gpus)
	if len(v.tags) > 0 {
		model = fmt.Sprintf("  %s ×%d  [%s]  ", v.model, v.gpus, strings.Join(v.tags, " "))
	}
	st.dim.write(&b, model)
	used += ansi.StringWidth(model)
	var free string
	if v.state == "alive" {
		free = fmt.Sprintf("%d/%d free", v.free, v.gpus)
	} else {
		free = "GPUs unknown"
	}
	b.WriteString(free)
	used += ansi.StringWidth(free)
	if rest := w - used - 1; rest > 0 {
		b.WriteByte(' ')
		st.rule.write(&b, strings.Repeat("─", rest))
		used = w
	}
	if used > w {
		return truncate(b.String(), w), w
	}
	return b.String(), used
}

// writeCell draws a GPU's first line: its state word between the cursor
// brackets (spaces when not under the cursor).
func (g *gridView) writeCell(b *strings.Builder, c *cellView, isCur, isSel bool, inner int) {
	st := g.st
	label, lw := c.label, c.labelW
	p := st.cell[c.kind]
	switch {
	case isSel && isCur:
		label, lw, p = labelSelected, 5, st.selCur
	case isSel:
		label, lw, p = labelSelected, 5, st.sel
	case isCur:
		p = st.cellCur[c.kind]
	case c.faded:
		p = st.faded
	}
	l, r := byte(' '), byte(' ')
	if isCur {
		l, r = '[', ']'
	}
	b.WriteString(p.pre)
	b.WriteByte(l)
	if lw > inner {
		b.WriteString(ansi.Truncate(label, inner, "…"))
	} else {
		b.WriteString(label)
		b.WriteString(spaces(inner - lw))
	}
	b.WriteByte(r)
	b.WriteString(p.post)
}

// writeTelemetry draws a GPU's second line: a utilisation bar and number.
func (g *gridView) writeTelemetry(b *strings.Builder, c *cellView, inner int) {
	st := g.st
	if c.kind == kindDown {
		b.WriteString(spaces(inner + 2))
		return
	}
	b.WriteByte(' ')
	if c.sub != "" {
		// "6:1 2g.20gb", or "2g.20gb" in a narrow cell (the detail pane's
		// title names the GPU).
		sub := c.sub
		if ansi.StringWidth(sub) > inner {
			sub = ansi.Truncate(c.profile, inner, "…")
		}
		st.dim.write(b, padRight(sub, inner))
		b.WriteByte(' ')
		return
	}
	if c.util < 0 {
		st.dim.write(b, padRight("  n/a", inner))
		b.WriteByte(' ')
		return
	}
	barW := inner - 5
	p := st.bar[0]
	switch {
	case c.faded:
		p = st.faded
	case c.util >= 70:
		p = st.bar[2]
	case c.util >= 30:
		p = st.bar[1]
	}
	filled := c.util * barW * 8 / 100
	full, part := filled/8, filled%8
	b.WriteString(p.pre)
	for range full {
		b.WriteString("█")
	}
	n := full
	if part > 0 && n < barW {
		b.WriteString(partialBlock(part))
		n++
	}
	b.WriteString(p.post)
	b.WriteString(spaces(barW - n))
	b.WriteByte(' ')
	num := strconv.Itoa(c.util) + "%"
	b.WriteString(spaces(4 - len(num)))
	st.dim.write(b, num)
	b.WriteByte(' ')
}

// partialBlock is the left-aligned block of eighths/8 of a cell.
func partialBlock(eighths int) string {
	switch eighths {
	case 1:
		return "▏"
	case 2:
		return "▎"
	case 3:
		return "▍"
	case 4:
		return "▌"
	case 5:
		return "▋"
	case 6:
		return "▊"
	case 7:
		return "▉"
	}
	return ""
}
