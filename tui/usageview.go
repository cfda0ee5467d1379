package tui

import (
	"context"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/base/words"
)

// usageWindow is how far back the usage view counts, as `dibs usage`.
const usageWindow = "7d"

// usageView is GPU-hours per user over the last week and each user's
// fair-share factor now: why the queue orders them as it does.
type usageView struct {
	*common
	rep   api.UsageReport
	state fetchState
	cur   listCursor
}

type usageMsg struct {
	rep api.UsageReport
	err error
}

// fetch asks for usage: now, or when what the view has is 15 s old (it
// reads every node's ledger).
func (v *usageView) fetch(now bool) tea.Cmd {
	if !v.state.due(now, v.now(), 15*time.Second) || v.backend == nil {
		return nil
	}
	v.state.loading = true
	return v.ask("", func(ctx context.Context, be Backend) tea.Msg {
		r, err := be.Usage(ctx, usageWindow)
		return usageMsg{rep: r, err: err}
	})
}

func (v *usageView) got(msg usageMsg) {
	v.state = fetchState{at: v.now(), err: msg.err}
	if msg.err == nil {
		v.rep = msg.rep
		for i := range v.rep.Users {
			v.rep.Users[i].User = termsafe.String(v.rep.Users[i].User)
		}
		for i := range v.rep.Missing {
			v.rep.Missing[i] = termsafe.String(v.rep.Missing[i])
		}
		v.cur.clamp(len(v.rep.Users))
	}
}

func (v *usageView) update(msg tea.KeyPressMsg) tea.Cmd {
	switch {
	case key.Matches(msg, v.keys.Up):
		v.cur.move(-1, len(v.rep.Users))
	case key.Matches(msg, v.keys.Down):
		v.cur.move(1, len(v.rep.Users))
	}
	return nil
}

// lines draws the usage table, with a bar of GPU-hours when there is room.
func (v *usageView) lines(w, h int) []string {
	widths := []int{12, 9, 9, 5, 10, 7, 5}
	out := v.listHeader("usage · last 7 days · fair-share now", cols(widths, "USER", "GPU-HOURS", "DECAYED", "SHARE", "FAIR-SHARE", "RUNNING", "QUOTA"), w)
	switch {
	case v.state.at.IsZero() || (v.state.err != nil && len(v.rep.Users) == 0):
		return v.message(out, v.state.loadingText("usage"), w)
	case len(v.rep.Users) == 0:
		return v.message(out, "no GPU-hours in the last 7 days", w)
	}
	most := 0.0
	for _, u := range v.rep.Users {
		most = max(most, u.GPUHours)
	}
	used := 2 + 12 + 9 + 9 + 5 + 10 + 7 + 5 + 7
	barW := w - used - 2
	from, to := v.cur.window(len(v.rep.Users), h-len(out)-1, 1)
	for i := from; i < to; i++ {
		u := v.rep.Users[i]
		quota := "-"
		if u.Quota > 0 {
			quota = fmt.Sprint(u.Quota)
		}
		text := cols(widths, u.User, fmt.Sprintf("%9.1f", u.GPUHours), fmt.Sprintf("%9.1f", u.Decayed), fmt.Sprintf("%5.1f", u.Share),
			fmt.Sprintf("%10.3f", u.FairShare), fmt.Sprintf("%7s", words.FormatGPUs(u.Running)), fmt.Sprintf("%5s", quota))
		if barW >= 10 && most > 0 {
			text += "  " + strings.Repeat("█", int(u.GPUHours/most*float64(barW)+0.5))
		}
		out = append(out, v.row(text, i == v.cur.cur, u.User == v.board.You.User, w))
	}
	note := "fair-share: near 1 for who used least lately; the queue puts them first"
	if len(v.rep.Missing) > 0 {
		note = "not counted (no answer): " + strings.Join(v.rep.Missing, ", ")
	}
	return append(out, " "+v.st.dim.render(truncate(note, w-1)))
}
