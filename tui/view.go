package tui

import (
	"fmt"
	"strconv"
	"strings"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/dibs-gpu/dibs/lease/termsafe"
)

// wideWidth is where the detail pane moves from under the grid to its right.
const wideWidth = 160

// Cell widths: 9 fits eight GPUs in 80 columns; wider cells show longer names.
const (
	minCell = 9
	maxCell = 14
)

// View draws the board.
func (m *Model) View() tea.View {
	content, cur := m.render()
	v := tea.NewView(content)
	v.AltScreen = true
	v.MouseMode = tea.MouseModeCellMotion
	v.WindowTitle = "dibs"
	if cur != nil {
		cur.Shape = m.st.input.Cursor.Shape
		if !m.noColor {
			cur.Color = m.st.input.Cursor.Color
		}
		v.Cursor = cur
	}
	return v
}

// render lays the frame out: header, legend, grid and panel (side by side
// when wide, stacked otherwise), status, footer. It also records where each
// GPU was drawn, for mouse clicks.
func (m *Model) render() (string, *tea.Cursor) {
	w, h := m.width, m.height
	m.hits = m.hits[:0]
	lines := make([]string, 0, h+2)
	lines = append(lines, m.headerLine(w), m.legendLine(w))
	const top = 2
	bodyH := max(h-4, 1)
	var cur *tea.Cursor
	if w >= wideWidth {
		panelW := min(max(w*40/100, 56), 80)
		gridW := w - panelW - 3
		grid, gridWs := m.gridLines(gridW, bodyH, top)
		panel, pc := m.panelLines(panelW, bodyH)
		panel = clip(panel, bodyH, m.st)
		sep := m.st.rule.render("│")
		for i := range bodyH {
			var b strings.Builder
			if i < len(grid) {
				b.WriteString(grid[i])
				b.WriteString(spaces(gridW - gridWs[i]))
			} else {
				b.WriteString(spaces(gridW))
			}
			b.WriteString(" ")
			b.WriteString(sep)
			if i < len(panel) {
				b.WriteString(" ")
				b.WriteString(panel[i])
			}
			lines = append(lines, b.String())
		}
		if pc != nil && pc.Y < bodyH {
			cur = tea.NewCursor(gridW+3+pc.X, top+pc.Y)
		}
	} else {
		// The grid takes what it needs but leaves the panel room for a form
		// or the detail's first facts; the panel gets the rest.
		need := m.gridNeed(w)
		gridH := min(need, bodyH-min(7, bodyH/2))
		if m.form != nil || m.confirm != nil || m.showHelp {
			// What the person is doing now gets the room; the grid
			// scrolls to keep the cursor in view.
			p, _ := m.panelLines(w, bodyH)
			gridH = min(need, bodyH-len(p))
		}
		gridH = max(gridH, min(4, bodyH))
		panel, pc := m.panelLines(w, bodyH-gridH)
		panelH := bodyH - gridH
		panel = clip(panel, panelH, m.st)
		grid, _ := m.gridLines(w, gridH, top)
		lines = append(lines, grid...)
		py := len(lines)
		lines = append(lines, panel...)
		for len(lines) < top+bodyH {
			lines = append(lines, "")
		}
		if pc != nil && pc.Y < panelH {
			cur = tea.NewCursor(pc.X, py+pc.Y)
		}
	}
	// Every part keeps to its width, so the frame is not measured again:
	// measuring ANSI text is most of what a frame would cost.
	lines = append(lines, m.statusLine(w), m.footerLine(w))
	return strings.Join(lines, "\n"), cur
}

func (m *Model) headerLine(w int) string {
	st := m.st
	var left strings.Builder
	st.title.write(&left, " dibs ")
	left.WriteString("  ")
	var plain strings.Builder
	if !m.ready {
		plain.WriteString("connecting to the agent…")
	} else {
		s := m.sum
		fmt.Fprintf(&plain, "%d %s · %d GPUs · %d free · you hold %d", s.nodes, plural(s.nodes, "node", "nodes"), s.gpus, s.free, s.mine)
		if s.down > 0 {
			fmt.Fprintf(&plain, " · %d down", s.down)
		}
		if m.onlyMine {
			plain.WriteString(" · only mine")
		}
		if m.filter != "" {
			fmt.Fprintf(&plain, " · filter “%s”", termsafe.String(m.filter))
		}
	}
	left.WriteString(plain.String())
	leftW := 8 + ansi.StringWidth(plain.String())
	right := ""
	if m.ready && m.board.You.User != "" {
		right = m.board.You.User
		if m.board.Self != "" {
			right += "@" + m.board.Self
		}
	}
	right += "  " + m.now().Format("15:04") + " "
	rw := ansi.StringWidth(right)
	if leftW+rw+1 > w {
		return truncate(left.String(), w)
	}
	return left.String() + spaces(w-leftW-rw) + st.dim.render(right)
}

// legendLine says what each cell means, in the cells' own styles.
func (m *Model) legendLine(w int) string {
	st := m.st
	items := []struct {
		p    paint
		text string
	}{
		{st.cell[kindFree], labelFree},
		{st.cell[kindMine], labelMine},
		{st.cell[kindTheirs], "user=theirs"},
		{st.cell[kindIdle], labelIdle},
		{st.cell[kindSquat], labelSquat},
		{st.cell[kindOver], labelOver},
		{st.cell[kindDown], labelDown},
		{st.sel, "✓selected"},
		{st.dim, "[cursor]"},
	}
	var b strings.Builder
	b.WriteByte(' ')
	used := 1
	for i, it := range items {
		gap := 2
		if i == 0 {
			gap = 0
		}
		tw := ansi.StringWidth(it.text)
		if used+gap+tw > w {
			break
		}
		b.WriteString(spaces(gap))
		it.p.write(&b, it.text)
		used += gap + tw
	}
	return b.String()
}

func (m *Model) statusLine(w int) string {
	st := m.st
	text, kind := m.status, m.statusKind
	if text == "" && len(m.sel) > 0 {
		text, kind = selectionText(m.selNode, m.sel), statusInfo
	}
	if text == "" {
		return ""
	}
	var p paint
	prefix := ""
	switch kind {
	case statusOK:
		p, prefix = st.statusOK, "✓ "
	case statusErr:
		p, prefix = st.statusErr, "✗ "
	case statusNotice:
		p, prefix = st.statusNotice, "⚑ "
	default:
		p = st.statusInfo
	}
	return " " + p.render(truncate(prefix+text, w-1))
}

func (m *Model) footerLine(w int) string {
	key := footerKey{w: w, confirm: m.confirm != nil, form: m.form != nil, st: m.st}
	if m.form != nil {
		key.multi = m.form.keys.multi
	}
	if key == m.footer.key && m.footer.val != "" {
		return m.footer.val
	}
	m.footer.key, m.footer.val = key, m.renderFooter(w)
	return m.footer.val
}

// footerKey is what the footer depends on; the help bubble is slow enough
// to be worth not redrawing every frame.
type footerKey struct {
	w                    int
	confirm, form, multi bool
	st                   *styles
}

func (m *Model) renderFooter(w int) string {
	m.help.SetWidth(max(w-1, 1))
	if m.confirm != nil || m.form != nil {
		fk := defaultFormKeyMap()
		fk.confirm = m.confirm != nil
		if m.form != nil {
			fk.multi = m.form.keys.multi
		}
		return truncate(" "+m.help.ShortHelpView(fk.ShortHelp()), w)
	}
	// The help bubble overflows when even its "…" would not fit; cut it here.
	return truncate(" "+m.help.ShortHelpView(m.keys.ShortHelp()), w)
}

// gridLayout is how the grid fits a width: cell width and cells per row.
type gridLayout struct{ cw, perRow int }

func (m *Model) layout(w int) gridLayout {
	most := 1
	for i := range m.views {
		most = max(most, len(m.views[i].cells))
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
func (m *Model) gridNeed(w int) int {
	if !m.ready || len(m.views) == 0 {
		return 2
	}
	l := m.layout(w)
	n := 1
	for i := range m.views {
		n += l.blockH(&m.views[i])
	}
	return n
}

// gridLines draws the ruler and as many node blocks as fit in h lines,
// scrolled so the cursor's node is whole. y0 is the screen line of the
// first, for mouse hits.
func (m *Model) gridLines(w, h, y0 int) (lines []string, widths []int) {
	st := m.st
	msg := func(s string) ([]string, []int) {
		s = truncate(s, w-2)
		return []string{"", "  " + st.dim.render(s)}, []int{0, 2 + ansi.StringWidth(s)}
	}
	if !m.ready {
		return msg("waiting for the agent's board…")
	}
	if len(m.views) == 0 {
		text := "the agent reports no nodes"
		switch {
		case m.onlyMine && m.filter == "":
			text = "you hold no GPUs — m shows every node, c claims"
		case m.filter != "":
			text = fmt.Sprintf("no node, user or model matches “%s” — esc clears the filter", termsafe.String(m.filter))
		}
		return msg(text)
	}
	l := m.layout(w)
	// When not every node fits, the last line says how many more there are.
	limit := h
	if m.gridNeed(w) > h {
		m.scrollTo(l, h-1)
		if m.span(l, m.top, len(m.views)-1) > h-1 {
			limit = max(h-1, 2)
			m.scrollTo(l, limit-1)
		}
	}
	lines = make([]string, 1, h)
	widths = make([]int, 1, h)
	inner := l.cw - 2
	below := 0
	for i := m.top; i < len(m.views); i++ {
		v := &m.views[i]
		if len(lines) >= limit {
			below++
			continue
		}
		if len(lines)+l.blockH(v) > limit {
			below++ // drawn in part
		}
		m.hits = append(m.hits, hit{y: y0 + len(lines), h: 1, x0: 0, x1: w, node: i, col: -1})
		hl, hw := m.nodeHeader(v, i == m.curNode, w)
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
				isCur := i == m.curNode && j == m.curCol
				m.writeCell(&a, c, isCur, m.isSelected(v.name, c.gpu), inner)
				m.writeTelemetry(&b, c, inner)
				m.hits = append(m.hits, hit{y: y0 + len(lines), h: 2, x0: 1 + (j-from)*l.cw, x1: 1 + (j-from+1)*l.cw, node: i, col: j})
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
	lines[0], widths[0] = m.ruler(l, w)
	if limit < h {
		for len(lines) < limit {
			lines, widths = append(lines, ""), append(widths, 0)
		}
		more := ""
		if below > 0 {
			more = truncate(fmt.Sprintf("  ▼ %d more %s below — j/↓ scrolls", below, plural(below, "node", "nodes")), w)
		}
		lines, widths = append(lines, m.st.dim.render(more)), append(widths, ansi.StringWidth(more))
	}
	return lines, widths
}

// scrollTo moves the first drawn node so the cursor's block fits in avail
// lines, and uses the space when the end of the list is reached.
func (m *Model) scrollTo(l gridLayout, avail int) {
	m.top = min(max(m.top, 0), len(m.views)-1)
	if m.top > m.curNode {
		m.top = m.curNode
	}
	for m.top < m.curNode && m.span(l, m.top, m.curNode) > avail {
		m.top++
	}
	for m.top > 0 && m.span(l, m.top-1, len(m.views)-1) <= avail {
		m.top--
	}
}

// span is how many lines node blocks from..to take.
func (m *Model) span(l gridLayout, from, to int) int {
	n := 0
	for i := from; i <= to; i++ {
		n += l.blockH(&m.views[i])
	}
	return n
}

func (m *Model) ruler(l gridLayout, w int) (string, int) {
	st := m.st
	var b strings.Builder
	b.WriteByte(' ')
	for c := 0; c < l.perRow; c++ {
		b.WriteString(padRight(" "+strconv.Itoa(c), l.cw))
	}
	r := truncate(strings.TrimRight(b.String(), " "), w)
	out := st.dim.render(r)
	used := ansi.StringWidth(r)
	if m.top > 0 {
		info := fmt.Sprintf("▲ %d above ", m.top)
		iw := ansi.StringWidth(info)
		if used+iw+2 <= w {
			out += spaces(w-used-iw) + st.dim.render(info)
			used = w
		}
	}
	return out, used
}

func (m *Model) nodeHeader(v *nodeView, isCur bool, w int) (string, int) {
	st := m.st
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
	case "suspect":
		sp = st.stateSuspect
	default:
		sp = st.stateDown
	}
	sp.write(&b, v.state)
	used += 2 + ansi.StringWidth(v.state)
	model := fmt.Sprintf("  %s ×%d  ", v.model, len(v.cells))
	st.dim.write(&b, model)
	used += ansi.StringWidth(model)
	var free string
	if v.state == "alive" {
		free = fmt.Sprintf("%d/%d free", v.free, len(v.cells))
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
func (m *Model) writeCell(b *strings.Builder, c *cellView, isCur, isSel bool, inner int) {
	st := m.st
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
func (m *Model) writeTelemetry(b *strings.Builder, c *cellView, inner int) {
	st := m.st
	if c.kind == kindDown {
		b.WriteString(spaces(inner + 2))
		return
	}
	b.WriteByte(' ')
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

// panelLines is what the panel shows: a question, a form, the help or the
// selected GPU's detail. The cursor position is set while a form is open.
func (m *Model) panelLines(w, maxH int) ([]string, *tea.Position) {
	switch {
	case m.confirm != nil:
		lines := []string{m.titleRule(m.confirm.title, w)}
		for _, l := range m.confirm.lines {
			lines = append(lines, " "+truncate(l, w-1))
		}
		return lines, nil
	case m.form != nil:
		fl, cl, cc := m.form.view(m.st, w-1)
		lines := []string{m.titleRule(m.form.title, w)}
		for _, l := range fl[1:] {
			lines = append(lines, " "+l)
		}
		return lines, &tea.Position{X: 1 + cc, Y: cl}
	case m.showHelp:
		return m.helpLines(w), nil
	}
	return m.detailLines(w, maxH), nil
}

func (m *Model) titleRule(title string, w int) string {
	st := m.st
	title = truncate(title, max(w-5, 1))
	rest := w - 4 - ansi.StringWidth(title)
	var b strings.Builder
	st.rule.write(&b, "── ")
	st.bold.write(&b, title)
	if rest > 0 {
		b.WriteByte(' ')
		st.rule.write(&b, strings.Repeat("─", rest))
	}
	return b.String()
}

func (m *Model) helpLines(w int) []string {
	lines := []string{m.titleRule("keys", w)}
	for _, l := range strings.Split(m.help.FullHelpView(m.keys.FullHelp()), "\n") {
		lines = append(lines, truncate(" "+l, w))
	}
	st := m.st
	legend := []string{
		" " + st.cell[kindFree].render(labelFree) + " nobody holds it  " + st.cell[kindMine].render(labelMine) + " yours  " + st.cell[kindTheirs].render("user") + " held by them",
		" " + st.cell[kindIdle].render(labelIdle) + " held, unused  " + st.cell[kindSquat].render(labelSquat) + " used without the lease",
		" " + st.cell[kindOver].render(labelOver) + " past its end  " + st.cell[kindDown].render(labelDown) + " node not alive: unknown, not free",
	}
	for _, l := range legend {
		lines = append(lines, truncate(l, w))
	}
	return lines
}

// clip cuts lines to h, marking what was left out.
func clip(lines []string, h int, st *styles) []string {
	if len(lines) <= h {
		return lines
	}
	if h <= 0 {
		return nil
	}
	out := lines[:h]
	out[h-1] = " " + st.dim.render(fmt.Sprintf("… %d more", len(lines)-h+1))
	return out
}

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
