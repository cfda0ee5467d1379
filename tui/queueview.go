package tui

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/termsafe"
)

// queueView is the cluster's queue, in the order the scheduler considers
// it: when each request should start and why it waits (including a
// request whose origin is down). x withdraws one of the caller's.
type queueView struct {
	*common
	q     api.Queue
	state fetchState
	cur   listCursor
}

type (
	queueMsg struct {
		q   api.Queue
		err error
	}
	cancelDoneMsg struct {
		id  string
		err error
	}
)

// fetch asks for the queue: now, or when what the view has is a second old.
func (v *queueView) fetch(now bool) tea.Cmd {
	if !v.state.due(now, v.now(), time.Second) || v.backend == nil {
		return nil
	}
	v.state.loading = true
	return v.ask("", func(ctx context.Context, be Backend) tea.Msg {
		q, err := be.Queue(ctx)
		return queueMsg{q: q, err: err}
	})
}

func (v *queueView) got(msg queueMsg) {
	v.state = fetchState{at: v.now(), err: msg.err}
	if msg.err == nil {
		v.q = msg.q
		for i := range v.q.Entries {
			e := &v.q.Entries[i]
			for _, p := range []*string{&e.ID, &e.User, &e.Node, &e.Note, &e.Waiting, &e.Duration, &e.Kind} {
				*p = termsafe.String(*p)
			}
		}
		v.cur.clamp(len(v.q.Entries))
	}
}

func (v *queueView) update(msg tea.KeyPressMsg) tea.Cmd {
	k := v.keys
	switch {
	case key.Matches(msg, k.Up):
		v.cur.move(-1, len(v.q.Entries))
	case key.Matches(msg, k.Down):
		v.cur.move(1, len(v.q.Entries))
	case key.Matches(msg, k.Release):
		if v.cur.cur >= len(v.q.Entries) {
			return nil
		}
		e := v.q.Entries[v.cur.cur]
		switch {
		case e.Running:
			v.setStatus(statusErr, e.ID+" is running: release its lease on the board (1) or in my sessions (4)")
		case e.User != v.board.You.User && !v.board.You.Admin:
			v.setStatus(statusErr, e.ID+" is "+e.User+"'s request: only they (or an admin) can withdraw it")
		default:
			v.closeHelp()
			v.confirm = &confirm{id: e.ID, cancel: true, title: "withdraw " + e.ID + "?",
				lines: []string{fmt.Sprintf("%s by %s, waiting since %s", size(e), e.User, v.clock(e.SubmittedAt)), "y withdraws · n keeps it"}}
		}
	}
	return nil
}

func size(e api.QueuedEntry) string {
	if e.Nodes > 1 {
		return fmt.Sprintf("%d nodes × %d GPUs", e.Nodes, e.GPUsPerNode)
	}
	return gpuCount(e.GPUsPerNode)
}

func gpuCount(n int) string { return strconv.Itoa(n) + plural(n, " GPU", " GPUs") }

// lines draws the queue in w columns and h lines: one row per request, and
// at narrow widths why it waits on a second line.
func (v *queueView) lines(w, h int) []string {
	widths := []int{3, 14, 10, 6, 6, 10}
	wide := w >= 120
	title := "queue"
	if v.q.Scheduler != "" {
		title += " · scheduler " + termsafe.String(v.q.Scheduler)
	}
	out := v.listHeader(title, cols(widths, "POS", "ID", "USER", "SIZE", "LIMIT", "START", "WAITING FOR"), w)
	switch {
	case v.state.at.IsZero() || (v.state.err != nil && len(v.q.Entries) == 0):
		return v.message(out, v.state.loadingText("the queue"), w)
	case len(v.q.Entries) == 0:
		return v.message(out, "nothing waits — a claim that does not fit can queue (dibs claim --queue)", w)
	}
	rowH := 2
	if wide {
		rowH = 1
	}
	from, to := v.cur.window(len(v.q.Entries), h-len(out), rowH)
	now := v.now()
	for i := from; i < to; i++ {
		e := v.q.Entries[i]
		pos, sz, start := e.Line(now)
		why := e.Waiting
		if e.Running {
			why = "runs (its leases are on the board)"
		}
		if e.Array != nil {
			why = e.Array.Summary(e.ID) // a job array: node01-q7[3-5] running, 12 waiting, 3 done
		}
		text := cols(widths, pos, e.ID, e.User, sz, e.Duration, start)
		mine := e.User == v.board.You.User
		if wide {
			out = append(out, v.row(text+" "+why, i == v.cur.cur, mine, w))
			continue
		}
		out = append(out, v.row(text, i == v.cur.cur, mine, w), "      "+v.st.dim.render(truncate(why, w-6)))
	}
	if to < len(v.q.Entries) || from > 0 {
		out = append(out, " "+v.st.dim.render(fmt.Sprintf("rows %d–%d of %d — j/k scroll", from+1, to, len(v.q.Entries))))
	}
	return out
}
