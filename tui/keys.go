package tui

import "charm.land/bubbles/v2/key"

// keyMap is every key of the board. The footer and the `?` help are built
// from the same bindings, so they cannot drift from what the keys do.
type keyMap struct {
	Up, Down, Left, Right key.Binding
	Move                  key.Binding // help only: the four above as one entry
	Select                key.Binding
	Clear                 key.Binding
	Claim                 key.Binding
	Run                   key.Binding
	Extend                key.Binding
	Release               key.Binding
	Attach                key.Binding
	Mine                  key.Binding
	Filter                key.Binding
	Help                  key.Binding
	Quit                  key.Binding
	// Views picks a view by number; NextView and PrevView cycle them;
	// ViewsHelp is the footer's entry for all of them.
	Views              [numViews]key.Binding
	NextView, PrevView key.Binding
	ViewsHelp          key.Binding
	// ListMove is the list views' footer entry for up and down.
	ListMove key.Binding
}

func defaultKeyMap() keyMap {
	return keyMap{
		Up:      key.NewBinding(key.WithKeys("up", "k"), key.WithHelp("↑/k", "previous node")),
		Down:    key.NewBinding(key.WithKeys("down", "j"), key.WithHelp("↓/j", "next node")),
		Left:    key.NewBinding(key.WithKeys("left", "h"), key.WithHelp("←/h", "previous GPU")),
		Right:   key.NewBinding(key.WithKeys("right", "l"), key.WithHelp("→/l", "next GPU")),
		Move:    key.NewBinding(key.WithKeys("up", "down", "left", "right", "h", "j", "k", "l"), key.WithHelp("←↓↑→/hjkl", "move")),
		Select:  key.NewBinding(key.WithKeys("space"), key.WithHelp("space", "select")),
		Clear:   key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "clear selection/filter")),
		Claim:   key.NewBinding(key.WithKeys("c"), key.WithHelp("c", "claim")),
		Run:     key.NewBinding(key.WithKeys("r"), key.WithHelp("r", "run")),
		Extend:  key.NewBinding(key.WithKeys("e"), key.WithHelp("e", "extend")),
		Release: key.NewBinding(key.WithKeys("x"), key.WithHelp("x", "release")),
		Attach:  key.NewBinding(key.WithKeys("a"), key.WithHelp("a", "attach")),
		Mine:    key.NewBinding(key.WithKeys("m"), key.WithHelp("m", "only mine")),
		Filter:  key.NewBinding(key.WithKeys("/"), key.WithHelp("/", "filter")),
		Help:    key.NewBinding(key.WithKeys("?"), key.WithHelp("?", "help")),
		Quit:    key.NewBinding(key.WithKeys("q", "ctrl+c"), key.WithHelp("q", "quit")),
		Views: [numViews]key.Binding{
			key.NewBinding(key.WithKeys("1"), key.WithHelp("1", "board")),
			key.NewBinding(key.WithKeys("2"), key.WithHelp("2", "queue")),
			key.NewBinding(key.WithKeys("3"), key.WithHelp("3", "usage")),
			key.NewBinding(key.WithKeys("4"), key.WithHelp("4", "my sessions")),
			key.NewBinding(key.WithKeys("5"), key.WithHelp("5", "events")),
			key.NewBinding(key.WithKeys("6"), key.WithHelp("6", "services")),
		},
		NextView:  key.NewBinding(key.WithKeys("tab"), key.WithHelp("tab", "next view")),
		PrevView:  key.NewBinding(key.WithKeys("shift+tab"), key.WithHelp("shift+tab", "previous view")),
		ViewsHelp: key.NewBinding(key.WithKeys("1", "2", "3", "4", "5", "6"), key.WithHelp("1-6", "views")),
		ListMove:  key.NewBinding(key.WithKeys("up", "down", "j", "k"), key.WithHelp("↑↓/jk", "move")),
	}
}

// ShortHelp is the footer, most used first: the help bubble cuts the tail
// with an ellipsis when the terminal is narrow.
func (k keyMap) ShortHelp() []key.Binding {
	return []key.Binding{k.Move, k.Select, k.Claim, k.Run, k.Extend, k.Release, k.Attach, k.ViewsHelp, k.Mine, k.Filter, k.Help, k.Quit}
}

// FullHelp is the `?` pane, one column per kind of key.
func (k keyMap) FullHelp() [][]key.Binding {
	return [][]key.Binding{
		{k.Up, k.Down, k.Left, k.Right, k.Select, k.Clear},
		{k.Claim, k.Run, k.Extend, k.Release, k.Attach},
		{k.Mine, k.Filter, k.Help, k.Quit},
		{k.Views[0], k.Views[1], k.Views[2], k.Views[3], k.Views[4], k.Views[5], k.NextView},
	}
}

// listKeys is the footer of the list views (queue, usage, sessions,
// events, services): what works there.
type listKeys struct {
	k    keyMap
	acts []key.Binding
}

func (l listKeys) ShortHelp() []key.Binding {
	out := []key.Binding{l.k.ListMove}
	out = append(out, l.acts...)
	return append(out, l.k.ViewsHelp, l.k.Help, l.k.Quit)
}

func (l listKeys) FullHelp() [][]key.Binding { return [][]key.Binding{l.ShortHelp()} }

// formKeyMap is what works while a form or a question is open.
type formKeyMap struct {
	Submit, Next, Prev, Cancel key.Binding
	Yes, No                    key.Binding
	confirm                    bool
	multi                      bool
}

func defaultFormKeyMap() formKeyMap {
	return formKeyMap{
		Submit: key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "submit")),
		Next:   key.NewBinding(key.WithKeys("tab", "down"), key.WithHelp("tab/↓", "next field")),
		Prev:   key.NewBinding(key.WithKeys("shift+tab", "up"), key.WithHelp("shift+tab/↑", "previous field")),
		Cancel: key.NewBinding(key.WithKeys("esc"), key.WithHelp("esc", "cancel")),
		Yes:    key.NewBinding(key.WithKeys("y", "Y"), key.WithHelp("y", "yes")),
		No:     key.NewBinding(key.WithKeys("n", "N", "esc"), key.WithHelp("n/esc", "no")),
	}
}

func (k formKeyMap) ShortHelp() []key.Binding {
	if k.confirm {
		return []key.Binding{k.Yes, k.No}
	}
	if k.multi {
		return []key.Binding{k.Submit, k.Next, k.Prev, k.Cancel}
	}
	return []key.Binding{k.Submit, k.Cancel}
}

func (k formKeyMap) FullHelp() [][]key.Binding { return [][]key.Binding{k.ShortHelp()} }
