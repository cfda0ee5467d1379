package tui

import (
	"fmt"
	"slices"
	"strings"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/dibs-gpu/dibs/base/termsafe"
)

// wideWidth is where the detail pane moves from under the grid to its right.
const wideWidth = 160

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

// render lays the frame out: header, the second line (the legend on the
// board, the views elsewhere), the view's body with its panel (side by side
// when wide, stacked otherwise), status, footer. It also records where each
// GPU was drawn, for mouse clicks.
func (m *Model) render() (string, *tea.Cursor) {
	w, h := m.width, m.height
	g := m.grid
	g.hits = g.hits[:0]
	lines := make([]string, 0, h+2)
	second := g.legendLine(w)
	if m.view != viewBoard {
		second = m.tabLine(w)
	}
	lines = append(lines, m.headerLine(w), second)
	const top = 2
	bodyH := max(h-4, 1)
	var cur *tea.Cursor
	switch {
	case m.view != viewBoard:
		var panel []string
		var pc *tea.Position
		if m.form != nil || m.confirm != nil || m.showHelp {
			panel, pc = m.panelLines(w, bodyH)
			panel = clip(panel, max(bodyH-4, 1), m.st)
		}
		listH := bodyH - len(panel)
		body := m.viewLines(w, listH)
		for len(body) < listH {
			body = append(body, "")
		}
		lines = append(lines, body[:listH]...)
		if pc != nil {
			cur = tea.NewCursor(pc.X, top+listH+pc.Y)
		}
		lines = append(lines, panel...)
	case w >= wideWidth:
		panelW := min(max(w*40/100, 56), 80)
		gridW := w - panelW - 3
		grid, gridWs := g.gridLines(gridW, bodyH, top)
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
	default:
		// The grid takes what it needs but leaves the panel room for a form
		// or the detail's first facts; the panel gets the rest.
		need := g.gridNeed(w)
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
		grid, _ := g.gridLines(w, gridH, top)
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

// viewLines is the body of a list view.
func (m *Model) viewLines(w, h int) []string {
	switch m.view {
	case viewQueue:
		return m.queue.lines(w, h)
	case viewUsage:
		return m.usage.lines(w, h)
	case viewSessions:
		return m.sessions.lines(w, h)
	case viewEvents:
		return m.events.lines(w, h)
	case viewServices:
		return m.services.lines(w, h)
	}
	return nil
}

// tabLine names the views, the open one marked, in place of the board's
// legend.
func (m *Model) tabLine(w int) string {
	var b strings.Builder
	b.WriteByte(' ')
	used := 1
	for v := range numViews {
		item := fmt.Sprintf("%d %s", v+1, viewNames[v])
		iw := ansi.StringWidth(item) + 2
		if used+iw > w {
			break
		}
		if v == m.view {
			m.st.cellCur[kindMine].write(&b, " "+item+" ")
		} else {
			m.st.dim.write(&b, " "+item+" ")
		}
		used += iw
	}
	return b.String()
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
		s := m.grid.sum
		fmt.Fprintf(&plain, "%d %s · %d %s · %d free · you hold %d", s.nodes, plural(s.nodes, "node", "nodes"), s.gpus, plural(s.gpus, "GPU", "GPUs"), s.free, s.mine)
		if s.restarting > 0 {
			fmt.Fprintf(&plain, " · %d restarting", s.restarting)
		}
		if s.down > 0 {
			fmt.Fprintf(&plain, " · %d down", s.down)
		}
		if m.grid.onlyMine {
			plain.WriteString(" · only mine")
		}
		if m.grid.filter != "" {
			fmt.Fprintf(&plain, " · filter “%s”", termsafe.String(m.grid.filter))
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
func (g *gridView) legendLine(w int) string {
	st := g.st
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
		{st.cell[kindTheirs], svcMark + "name=service"},
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
	if text == "" && len(m.grid.sel) > 0 && m.view == viewBoard {
		text, kind = selectionText(m.grid.selNode, m.grid.sel), statusInfo
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
	key := footerKey{w: w, confirm: m.confirm != nil, form: m.form != nil, st: m.st, view: m.view}
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
	view                 viewKind
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
	return m.fitKeys(m.viewKeys().ShortHelp(), w)
}

// fitKeys is the footer of bs in w columns. The help and quit keys stay
// whatever the width — a footer that cuts `? help` off hides the way to
// every other key, and it needed 137 columns whole — and the others are
// dropped from the end, a "…" saying some were, until the line fits.
func (m *Model) fitKeys(bs []key.Binding, w int) string {
	var head, tail []key.Binding
	for _, b := range bs {
		if k := b.Help().Key; k == m.keys.Help.Help().Key || k == m.keys.Quit.Help().Key {
			tail = append(tail, b)
		} else {
			head = append(head, b)
		}
	}
	// A mark, not a key: never matched.
	more := key.NewBinding(key.WithKeys("…"), key.WithHelp("…", "more"))
	// No cut of the bubble's own: the line is fitted here.
	m.help.SetWidth(0)
	defer m.help.SetWidth(max(w-1, 1))
	for i := len(head); ; i-- {
		show := slices.Clone(head[:i])
		if i < len(head) {
			show = append(show, more)
		}
		s := " " + strings.TrimRight(m.help.ShortHelpView(append(show, tail...)), " ")
		if ansi.StringWidth(s) <= w || i == 0 {
			// Narrower than even help and quit: cut, as the bubble would.
			return truncate(s, w)
		}
	}
}

// viewKeys is what works in the open view, for the footer and the help.
func (m *Model) viewKeys() help.KeyMap {
	k := m.keys
	switch m.view {
	case viewQueue:
		return listKeys{k: k, acts: []key.Binding{key.NewBinding(key.WithKeys("x"), key.WithHelp("x", "withdraw"))}}
	case viewUsage:
		return listKeys{k: k}
	case viewSessions:
		return listKeys{k: k, acts: []key.Binding{k.Attach, k.Extend, k.Release}}
	case viewEvents:
		return listKeys{k: k, acts: []key.Binding{key.NewBinding(key.WithKeys("m"), key.WithHelp("m", "only mine"))}}
	case viewServices:
		return listKeys{k: k, acts: []key.Binding{svcShowKey, k.Attach, key.NewBinding(key.WithKeys("x"), key.WithHelp("x", "stop"))}}
	}
	return k
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
	return m.grid.detailLines(w, maxH), nil
}

func (m *Model) helpLines(w int) []string {
	lines := []string{m.titleRule("keys", w)}
	for _, l := range strings.Split(m.help.FullHelpView(m.viewKeys().FullHelp()), "\n") {
		lines = append(lines, truncate(" "+l, w))
	}
	st := m.st
	if m.view == viewSessions || m.view == viewServices {
		legend := sessionStatesHelp
		if m.view == viewServices {
			legend = servicesStatesHelp
		}
		for _, l := range legend {
			lines = append(lines, truncate(" "+l, w))
		}
		return lines
	}
	legend := []string{
		" " + st.cell[kindFree].render(labelFree) + " nobody holds it  " + st.cell[kindMine].render(labelMine) + " yours  " + st.cell[kindTheirs].render("user") + " held by them",
		" " + st.cell[kindIdle].render(labelIdle) + " held, unused (" + st.cell[kindMineIdle].render(labelMineIdle) + " yours)  " + st.cell[kindSquat].render(labelSquat) + " used without the lease",
		" " + st.cell[kindOver].render(labelOver) + " past its end  " + st.cell[kindDown].render(labelDown) + " node not alive: unknown, not free",
		" " + st.cell[kindTheirs].render(svcMark+"name") + " held by a service, no end while it is up (" + st.cell[kindMine].render(markMine+svcMark) + " yours) — 6 lists them",
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
