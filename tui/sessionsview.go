package tui

import (
	"fmt"
	"slices"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

// sessionsView is the caller's leases on every node: how busy their GPUs
// are (so an idle one shows), how long each has, its tmux session; a
// attaches, e extends, x releases, right there.
type sessionsView struct {
	*common
	cur listCursor
}

// myLease is one of the caller's leases as the sessions view shows it.
type myLease struct {
	l     *lease.Lease
	node  string
	util  int // mean utilisation of its GPUs, -1 when unknown
	flags []lease.Flag
}

// mine lists the caller's leases from the board, by node then id, each
// with the mean utilisation of its GPUs and the flags on them.
func (v *sessionsView) mine() []myLease {
	var out []myLease
	for ni := range v.board.Nodes {
		n := &v.board.Nodes[ni]
		at := map[string]int{} // lease id to its index in out
		for gi := range n.GPUs {
			g := &n.GPUs[gi]
			// A whole GPU's lease, or the caller's part of a GPU held in
			// parts (a MIG instance, a budget).
			held := []*lease.Lease{g.Lease}
			for k := range g.Shares {
				held = append(held, &g.Shares[k])
			}
			for _, l := range held {
				if !v.common.mine(l) {
					continue
				}
				i, ok := at[l.ID]
				if !ok {
					i = len(out)
					at[l.ID] = i
					out = append(out, myLease{l: l, node: n.Name, util: meanUtil(n, l)})
				}
				for _, f := range g.Flags {
					if !slices.Contains(out[i].flags, f) {
						out[i].flags = append(out[i].flags, f)
					}
				}
			}
		}
	}
	return out
}

func (v *sessionsView) update(msg tea.KeyPressMsg) tea.Cmd {
	ls := v.mine()
	k := v.keys
	switch {
	case key.Matches(msg, k.Up):
		v.cur.move(-1, len(ls))
		return nil
	case key.Matches(msg, k.Down):
		v.cur.move(1, len(ls))
		return nil
	}
	v.cur.clamp(len(ls))
	if v.cur.cur >= len(ls) {
		if key.Matches(msg, k.Attach) {
			return v.startAttach(nil)
		}
		return nil
	}
	l := ls[v.cur.cur].l
	switch {
	case key.Matches(msg, k.Attach):
		return v.startAttach(l)
	case key.Matches(msg, k.Extend):
		v.openExtend(l)
	case key.Matches(msg, k.Release):
		v.openRelease(l)
	}
	return nil
}

// lines draws the caller's leases.
func (v *sessionsView) lines(w, h int) []string {
	widths := []int{11, 7, 5, 4, 6, 15, 8}
	out := v.listHeader("my sessions · "+v.board.You.String(), cols(widths, "LEASE", "NODE", "GPUS", "UTIL", "LEFT", "SESSION", "STATE", "NOTE"), w)
	if !v.ready {
		return v.message(out, "waiting for the agent's board…", w)
	}
	ls := v.mine()
	if len(ls) == 0 {
		return v.message(out, "you hold no GPUs — 1 shows the board, where c claims and r runs", w)
	}
	v.cur.clamp(len(ls))
	from, to := v.cur.window(len(ls), h-len(out)-1, 1)
	now := v.now()
	for i := from; i < to; i++ {
		x := ls[i]
		util := "n/a"
		if x.util >= 0 {
			util = fmt.Sprintf("%d%%", x.util)
		}
		left := words.FormatDuration(x.l.ExpiresAt.Sub(now))
		switch {
		case x.l.Service != nil:
			left = "no end" // a service: none while it is up (6 lists them)
		case !x.l.ExpiresAt.After(now):
			left = "overdue"
		}
		sess := x.l.Session
		if sess == "" {
			sess = "(claim only)"
		}
		gpus := joinInts(x.l.GPUs)
		if x.l.MIG != "" || x.l.MemMiB > 0 {
			// A part says which: "MIG 3g.40gb (0:1) of GPU 0", "20 GiB of GPU 1".
			gpus = leaseWhat(x.l, &v.board)
		}
		text := cols(widths, x.l.ID, x.node, gpus, util, left, sess, stateWords(x), x.l.Note)
		out = append(out, v.row(text, i == v.cur.cur, false, w))
	}
	hint := "a attaches · e extends · x releases — an idle GPU is reclaimed when someone waits"
	out = append(out, " "+v.st.dim.render(truncate(hint, w-1)))
	return append(out, " "+v.st.dim.render(truncate(sessionStates, w-1)))
}

// sessionStates says what the STATE column's words mean, under the list
// and in the `?` help: "quiet" was explained nowhere.
const sessionStates = "busy: in use · quiet: 0% now, not yet idle · idle: quiet too long, reclaimable"

// sessionStatesHelp is the longer legend of the STATE column, for `?`.
var sessionStatesHelp = []string{
	"STATE  busy      its GPUs are in use (utilisation above 0%)",
	"       quiet     nothing runs on them now, not yet for the idle time (idle_after)",
	"       idle      quiet for the idle time: may be reclaimed when someone waits",
	"       running   its GPUs' utilisation is not known",
	"       also      squatted, overdue, expiring, borrowed, reclaimed: as on the board",
}

// stateWords says what the board's flags say about a lease of the caller's.
func stateWords(x myLease) string {
	var s []string
	for _, f := range []lease.Flag{lease.FlagSquatted, lease.FlagOverdue, lease.FlagExpiring, lease.FlagIdle} {
		if slices.Contains(x.flags, f) {
			s = append(s, string(f))
		}
	}
	flagged := len(s) > 0
	if x.l.Borrowed {
		s = append(s, "borrowed")
	}
	switch {
	case !x.l.PreemptedAt.IsZero():
		s = append(s, "reclaimed")
	case flagged:
	case x.util > 0:
		s = append(s, "busy")
	case x.util == 0:
		// Not yet judged idle, but nothing runs: "busy" would mislead.
		s = append(s, "quiet")
	default:
		s = append(s, "running")
	}
	return strings.Join(s, ",")
}

// meanUtil is the mean utilisation of the GPUs l holds on n, -1 when
// unknown: what "your leases" shows so an idle one stands out.
func meanUtil(n *api.Node, l *lease.Lease) int {
	sum, k := 0, 0
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if g.Lease != nil && g.Lease.ID == l.ID && g.UtilizationPct != nil {
			sum += *g.UtilizationPct
			k++
		}
	}
	if k == 0 {
		return -1
	}
	return sum / k
}
