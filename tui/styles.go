package tui

import (
	"image/color"
	"strings"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/textinput"
	"charm.land/lipgloss/v2"
)

// paint is a lipgloss style reduced to the escape sequences around its text.
// The board draws hundreds of cells per frame; wrapping a label in two cached
// strings is far cheaper than asking lipgloss to render each one. Only styles
// without padding, width or borders can be reduced this way, which is all the
// board uses per cell.
type paint struct{ pre, post string }

func paintOf(st lipgloss.Style, noColor bool) paint {
	if noColor {
		return paint{}
	}
	r := st.Render("x")
	i := strings.IndexByte(r, 'x')
	if i < 0 {
		return paint{}
	}
	return paint{pre: r[:i], post: r[i+1:]}
}

func (p paint) render(s string) string {
	if p.pre == "" && p.post == "" {
		return s
	}
	return p.pre + s + p.post
}

func (p paint) write(b *strings.Builder, s string) {
	b.WriteString(p.pre)
	b.WriteString(s)
	b.WriteString(p.post)
}

// styles is every look the board uses, built once per background (dark or
// light) and colour setting. With noColor every paint is empty: the board
// stays readable because each state has its own symbol or word.
type styles struct {
	noColor bool

	cell    [numKinds]paint // a GPU cell by its state
	cellCur [numKinds]paint // the same under the cursor
	sel     paint           // a selected (free) GPU
	selCur  paint
	faded   paint // a cell that does not match the filter or "only mine"

	bar [3]paint // utilisation bar: low, medium, high

	title        paint
	bold         paint
	dim          paint
	rule         paint
	nodeName     paint
	nodeNameCur  paint
	stateAlive   paint
	stateSuspect paint
	stateDown    paint
	label        paint
	statusInfo   paint
	statusOK     paint
	statusErr    paint
	statusNotice paint

	help  help.Styles
	input textinput.Styles
}

func newStyles(isDark, noColor bool) *styles {
	ld := lipgloss.LightDark(isDark)
	c := func(light, dark string) color.Color { return ld(lipgloss.Color(light), lipgloss.Color(dark)) }
	fg := func(light, dark string) lipgloss.Style { return lipgloss.NewStyle().Foreground(c(light, dark)) }
	p := func(st lipgloss.Style) paint { return paintOf(st, noColor) }

	kind := [numKinds]lipgloss.Style{
		kindFree: fg("#007A33", "#5FD75F"),
		kindMine: fg("#0055CC", "#5FAFFF").Bold(true),
		// The caller's own idle GPU: theirs (the star), in idle's colour.
		kindMineIdle: fg("#8A6100", "#D7AF5F").Bold(true),
		kindTheirs:   fg("#3A3A3A", "#D0D0D0"),
		kindIdle:     fg("#8A6100", "#D7AF5F"),
		kindSquat:    fg("#C80000", "#FF5F5F").Bold(true),
		kindOver:     fg("#C04A00", "#FF8700").Bold(true),
		kindDown:     fg("#9E9E9E", "#6C6C6C"),
	}
	s := &styles{noColor: noColor}
	for k, st := range kind {
		s.cell[k] = p(st)
		s.cellCur[k] = p(st.Reverse(true).Bold(true))
	}
	selSt := fg("#007A33", "#5FD75F").Bold(true).Underline(true)
	s.sel = p(selSt)
	s.selCur = p(selSt.Reverse(true))
	s.faded = p(fg("#BCBCBC", "#4E4E4E"))
	s.bar = [3]paint{
		p(fg("#5F8700", "#5F875F")),
		p(fg("#AF8700", "#D7AF00")),
		p(fg("#D70000", "#FF5F5F")),
	}
	s.title = p(lipgloss.NewStyle().Bold(true).Foreground(lipgloss.Color("#FFFFFF")).Background(c("#5A56E0", "#5F5FD7")))
	s.bold = p(lipgloss.NewStyle().Bold(true))
	s.dim = p(fg("#808080", "#8A8A8A"))
	s.rule = p(fg("#C6C6C6", "#444444"))
	s.nodeName = p(lipgloss.NewStyle().Bold(true))
	s.nodeNameCur = p(fg("#0055CC", "#5FAFFF").Bold(true))
	s.stateAlive = p(fg("#007A33", "#5FD75F"))
	s.stateSuspect = p(fg("#8A6100", "#D7AF5F").Bold(true))
	s.stateDown = p(fg("#C80000", "#FF5F5F").Bold(true))
	s.label = p(fg("#6C6C6C", "#8A8A8A"))
	s.statusInfo = p(lipgloss.NewStyle())
	s.statusOK = p(fg("#007A33", "#5FD75F"))
	s.statusErr = p(fg("#C80000", "#FF5F5F").Bold(true))
	s.statusNotice = p(fg("#8A6100", "#D7AF5F"))

	if noColor {
		plain := lipgloss.NewStyle()
		s.help = help.Styles{Ellipsis: plain, ShortKey: plain, ShortDesc: plain, ShortSeparator: plain, FullKey: plain, FullDesc: plain, FullSeparator: plain}
		var in textinput.Styles
		in.Focused = textinput.StyleState{Text: plain, Placeholder: plain, Suggestion: plain, Prompt: plain}
		in.Blurred = in.Focused
		s.input = in
	} else {
		s.help = help.DefaultStyles(isDark)
		s.input = textinput.DefaultStyles(isDark)
		s.input.Cursor.Blink = false
	}
	return s
}
