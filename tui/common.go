package tui

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/help"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

// common is what every part of the board shares for one session, the way
// soft-serve's common does: the agent, the size and the styles, the board
// as last received, the status line, and the dialog open over any view (a
// form, a question, the help). The root model owns it; each view holds a
// pointer to it.
type common struct {
	backend Backend
	attach  func([]string) tea.Cmd
	now     func() time.Time
	ctx     context.Context
	cancel  context.CancelFunc
	noColor bool
	isDark  bool
	st      *styles
	width   int
	height  int
	keys    keyMap
	help    help.Model

	board api.Board
	ready bool // a board has arrived
	// hist is each GPU's recent telemetry as this board saw it, for the
	// detail pane's charts.
	hist history

	status     string
	statusKind statusKind
	lastNotice string
	streamErr  bool

	form     *form
	confirm  *confirm
	showHelp bool
}

type statusKind int

const (
	statusInfo statusKind = iota
	statusOK
	statusErr
	statusNotice
)

// confirm is the y/n question before a release, a cancel or a service's
// stop.
type confirm struct {
	id     string
	title  string
	lines  []string
	cancel bool // withdraw a queued request, not release a lease
	// service names the service whose replica's lease id is: stopping it
	// is a release said in a service's words.
	service string
}

// setStatus shows s in the status line. Status text quotes agents' errors,
// notices and names from every node, so it is escaped (termsafe) here, the
// one way into the status line.
func (c *common) setStatus(k statusKind, s string) {
	c.statusKind, c.status = k, termsafe.String(s)
}

// closeDialogs closes the help (a form or a question is about to open).
func (c *common) closeHelp() { c.showHelp, c.help.ShowAll = false, false }

// clock prints a lease end as people read it: 18:40 today, else with the day.
func (c *common) clock(t time.Time) string {
	now := c.now()
	t = t.In(now.Location())
	y1, m1, d1 := t.Date()
	y2, m2, d2 := now.Date()
	if y1 == y2 && m1 == m2 && d1 == d2 {
		return t.Format("15:04")
	}
	return t.Format("Mon 15:04")
}

// ask runs one call to the agent off the update loop, bounded by
// actionTimeout, saying what it is doing in the status line meanwhile.
func (c *common) ask(doing string, call func(context.Context, Backend) tea.Msg) tea.Cmd {
	be, ctx := c.backend, c.ctx
	if be == nil {
		c.setStatus(statusErr, "no agent to talk to")
		return nil
	}
	if doing != "" {
		c.setStatus(statusInfo, doing)
	}
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, actionTimeout)
		defer cancel()
		return call(ctx, be)
	}
}

// refresh fetches the board once after an action, so the result shows even
// while the stream is reconnecting.
func (c *common) refresh() tea.Cmd {
	if c.backend == nil {
		return nil
	}
	return c.ask("", func(ctx context.Context, be Backend) tea.Msg {
		b, err := be.Board(ctx)
		return fetchedMsg{board: b, err: err}
	})
}

func (c *common) quit() tea.Cmd {
	c.cancel()
	return tea.Quit
}

// titleRule is a panel's title across its width.
func (c *common) titleRule(title string, w int) string {
	st := c.st
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

// mine reports whether l is the caller's.
func (c *common) mine(l *lease.Lease) bool { return l != nil && l.UID == c.board.You.UID }

// openExtend asks how much longer l should run.
func (c *common) openExtend(l *lease.Lease) {
	c.closeHelp()
	ends := "ends " + c.clock(l.ExpiresAt)
	if left := l.ExpiresAt.Sub(c.now()); left > 0 {
		ends += " (" + words.FormatDuration(left) + " left)"
	} else {
		ends = "overdue by " + words.FormatDuration(-left)
	}
	c.form = newExtendForm(c.st.input, l, leaseWhat(l, &c.board), ends)
}

// openRelease asks before l is released.
func (c *common) openRelease(l *lease.Lease) {
	q := &confirm{id: l.ID, title: "release " + l.ID + "?"}
	who := "yours"
	if !c.mine(l) {
		who = "held by " + holderName(l)
	}
	q.lines = append(q.lines, fmt.Sprintf("%s on %s, %s", leaseWhat(l, &c.board), l.Node, who))
	if l.Session != "" {
		q.lines = append(q.lines, "its tmux session "+l.Session+" ends too")
	}
	q.lines = append(q.lines, "y releases · n keeps it")
	c.closeHelp()
	c.confirm = q
}

// startAttach attaches to l's session when it is the caller's, else (l
// nil, or someone else's) to the caller's latest session.
func (c *common) startAttach(l *lease.Lease) tea.Cmd {
	id := ""
	if c.mine(l) {
		if l.Session == "" {
			c.setStatus(statusErr, l.ID+" has no tmux session: it was claimed without a command (r claims and starts one)")
			return nil
		}
		id = l.ID
	}
	what := id
	if what == "" {
		what = "your latest session"
	}
	return c.ask("finding "+what+"…", func(ctx context.Context, be Backend) tea.Msg {
		resp, err := be.Attach(ctx, id)
		return attachReadyMsg{id: id, resp: resp, err: err}
	})
}

// errText turns an error from the agent into words for the status line.
func errText(err error) string {
	var ae *api.Error
	switch {
	case errors.As(err, &ae):
		return ae.Msg
	case errors.Is(err, context.DeadlineExceeded):
		return "the agent did not answer in time (is it overloaded or stopped?)"
	case errors.Is(err, context.Canceled):
		return "cancelled"
	}
	return err.Error()
}
