package tui

import (
	"context"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/event"
)

// eventsView is what happened on every node in the last day, newest at the
// bottom (as `dibs events` prints it); m keeps only the caller's.
type eventsView struct {
	*common
	list     api.EventList
	state    fetchState
	cur      listCursor
	onlyMine bool
	follow   bool // the cursor sits on the newest and moves with it
}

type eventsMsg struct {
	list api.EventList
	mine bool
	err  error
}

// fetch asks for the day's events: now, or when what the view has is a
// second old (every change brings the board, and with it this question).
func (v *eventsView) fetch(now bool) tea.Cmd {
	if !v.state.due(now, v.now(), time.Second) || v.backend == nil {
		return nil
	}
	v.state.loading = true
	req := api.EventsRequest{Since: "24h"}
	if v.onlyMine {
		req.User = v.board.You.User
	}
	mine := v.onlyMine
	return v.ask("", func(ctx context.Context, be Backend) tea.Msg {
		l, err := be.Events(ctx, req)
		return eventsMsg{list: l, mine: mine, err: err}
	})
}

func (v *eventsView) got(msg eventsMsg) {
	v.state = fetchState{at: v.now(), err: msg.err}
	if msg.err != nil || msg.mine != v.onlyMine {
		return
	}
	atEnd := v.follow || v.list.Events == nil || v.cur.cur >= len(v.list.Events)-1
	v.list = msg.list.Escaped()
	if atEnd {
		v.cur.cur = len(v.list.Events) - 1
		v.follow = true
	}
	v.cur.clamp(len(v.list.Events))
}

func (v *eventsView) update(msg tea.KeyPressMsg) tea.Cmd {
	n := len(v.list.Events)
	switch {
	case key.Matches(msg, v.keys.Up):
		v.cur.move(-1, n)
		v.follow = false
	case key.Matches(msg, v.keys.Down):
		v.cur.move(1, n)
		v.follow = v.cur.cur == n-1
	case key.Matches(msg, v.keys.Mine):
		v.onlyMine = !v.onlyMine
		v.list, v.follow = api.EventList{}, true
		v.state = fetchState{}
		if v.onlyMine {
			v.setStatus(statusInfo, "showing only your events — m shows everyone's")
		} else {
			v.setStatus(statusInfo, "showing everyone's events")
		}
		return v.fetch(true)
	}
	return nil
}

// lines draws the events, one per line: when, where, what, newest last.
func (v *eventsView) lines(w, h int) []string {
	title := "events · last 24 hours"
	if v.onlyMine {
		title += " · only yours"
	}
	out := v.listHeader(title, "TIME     NODE     KIND          WHAT HAPPENED", w)
	evs := v.list.Events
	switch {
	case v.state.at.IsZero() && len(evs) == 0:
		return v.message(out, v.state.loadingText("the events"), w)
	case len(evs) == 0:
		return v.message(out, "nothing happened in the last 24 hours", w)
	}
	foot := ""
	if len(v.list.Missing) > 0 {
		foot = "not listed (no answer): " + strings.Join(v.list.Missing, ", ")
	}
	room := h - len(out)
	if foot != "" {
		room--
	}
	from, to := v.cur.window(len(evs), room, 1)
	for i := from; i < to; i++ {
		e := evs[i]
		text := cols([]int{8, 8, 13}, e.At.In(v.now().Location()).Format("15:04:05"), e.Node, string(e.Kind), e.Text)
		out = append(out, v.row(text, i == v.cur.cur, e.User == v.board.You.User && e.Kind != event.EventAgentJoin, w))
	}
	if foot != "" {
		out = append(out, " "+v.st.dim.render(truncate(foot, w-1)))
	}
	return out
}
