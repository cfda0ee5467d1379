package tui

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// svcMark marks a GPU held by a service on the grid (⚙vllm) and a service
// in the lists: a service holds its GPUs with no end, so a person looking
// for free GPUs should tell it from a run that will finish.
const svcMark = "⚙"

// servicesView is every service of the cluster, one row per replica (as
// `dibs services` prints them): owner, where it runs, its URL, state,
// uptime, restarts and GPUs, the caller's own first; a attaches to one of
// the caller's, x stops it.
type servicesView struct {
	*common
	cur listCursor
}

// svcRow is one replica as the view shows it.
type svcRow struct {
	l     *lease.Lease
	state service.State
	mine  bool
}

// rows lists the board's services: the caller's first, then by owner,
// name and node. A service's replicas are its owner's live service
// leases of the same name, so they sit together.
func (v *servicesView) rows() []svcRow {
	out := make([]svcRow, 0, len(v.board.Services))
	for i := range v.board.Services {
		l := &v.board.Services[i]
		if l.Service == nil {
			continue
		}
		out = append(out, svcRow{l: l, state: v.board.ServiceState(l), mine: v.common.mine(l)})
	}
	slices.SortStableFunc(out, func(a, b svcRow) int {
		switch {
		case a.mine != b.mine:
			if a.mine {
				return -1
			}
			return 1
		case a.l.User != b.l.User:
			return strings.Compare(a.l.User, b.l.User)
		case a.l.Service.Name != b.l.Service.Name:
			return strings.Compare(a.l.Service.Name, b.l.Service.Name)
		case a.l.Node != b.l.Node:
			return strings.Compare(a.l.Node, b.l.Node)
		}
		return strings.Compare(a.l.ID, b.l.ID)
	})
	return out
}

func (v *servicesView) update(msg tea.KeyPressMsg) tea.Cmd {
	rs := v.rows()
	k := v.keys
	switch {
	case key.Matches(msg, k.Up):
		v.cur.move(-1, len(rs))
		return nil
	case key.Matches(msg, k.Down):
		v.cur.move(1, len(rs))
		return nil
	}
	v.cur.clamp(len(rs))
	if v.cur.cur >= len(rs) {
		return nil
	}
	r := rs[v.cur.cur]
	switch {
	case key.Matches(msg, svcShowKey):
		gpu := -1
		if len(r.l.GPUs) > 0 {
			gpu = r.l.GPUs[0]
		}
		name, node, mig := replicaName(r.l), r.l.Node, r.l.MIG
		return func() tea.Msg { return showOnBoardMsg{service: name, node: node, gpu: gpu, mig: mig} }
	case key.Matches(msg, k.Attach):
		if !r.mine {
			v.setStatus(statusErr, fmt.Sprintf("%s is %s's service: only its owner attaches to it", replicaName(r.l), holderName(r.l)))
			return nil
		}
		return v.startAttach(r.l)
	case key.Matches(msg, k.Release):
		v.openStop(r.l)
	}
	return nil
}

// svcShowKey shows the replica under the cursor on the board: its GPU
// under the grid's cursor, its processes and history in the detail pane.
var svcShowKey = key.NewBinding(key.WithKeys("enter"), key.WithHelp("enter", "show on board"))

// showOnBoardMsg asks the root to open the board with the cursor on a
// service's GPU (gpu -1: it holds none; the node's first).
type showOnBoardMsg struct {
	service, node string
	gpu           int
	mig           string
}

// showOnBoard opens the board on a service's node and GPU, or says why
// it cannot (the filter or "only mine" hides the node).
func (m *Model) showOnBoard(msg showOnBoardMsg) tea.Cmd {
	g := m.grid
	g.curName, g.curGPU, g.curMIG = msg.node, max(msg.gpu, 0), msg.mig
	g.rebuild()
	if n, _ := g.cursorGPU(); n == nil || n.Name != msg.node {
		m.setStatus(statusErr, msg.node+" is hidden by the filter or \"only mine\": esc or m shows it, then 6 and enter")
		return nil
	}
	if msg.gpu < 0 {
		m.setStatus(statusInfo, msg.service+" holds no GPU: it runs on "+msg.node)
	} else {
		m.setStatus(statusInfo, msg.service+" on "+msg.node+" — 6 goes back to the services")
	}
	return m.switchView(viewBoard)
}

// openStop asks before a service's replica is stopped: its lease ends,
// and with it the tmux session; the log stays.
func (c *common) openStop(l *lease.Lease) {
	name := replicaName(l)
	q := &confirm{id: l.ID, service: name, title: "stop service " + name + "?"}
	who := "yours"
	if !c.mine(l) {
		who = "run by " + holderName(l)
	}
	what := "no GPU"
	if len(l.GPUs) > 0 {
		what = leaseWhat(l, &c.board)
	}
	q.lines = append(q.lines, fmt.Sprintf("%s on %s (%s), %s", name, l.Node, what, who))
	if u := service.URL(l.Node, l.Service.Port); u != "" {
		q.lines = append(q.lines, u+" stops answering; its log stays: dibs logs "+name)
	} else {
		q.lines = append(q.lines, "its tmux session "+l.Session+" ends; its log stays: dibs logs "+name)
	}
	q.lines = append(q.lines, "y stops it · n keeps it")
	c.closeHelp()
	c.confirm = q
}

// Column widths of the services list: wide, and what fits in 80 columns,
// where the URL stands for the node (it names it) unless there is none.
var (
	svcColsWide   = []int{16, 10, 8, 24, 20, 7, 8}
	svcColsNarrow = []int{12, 7, 20, 15, 6, 3}
)

// svcWideWidth is where the list shows node and URL apart and words in
// full.
const svcWideWidth = 110

// lines draws the services.
func (v *servicesView) lines(w, h int) []string {
	wide := w >= svcWideWidth
	var head string
	if wide {
		head = cols(svcColsWide, "NAME", "OWNER", "NODE", "URL", "STATE", "UPTIME", "RESTARTS", "GPUS")
	} else {
		head = cols(svcColsNarrow, "NAME", "OWNER", "WHERE", "STATE", "UP", "RST", "GPUS")
	}
	rs := v.rows()
	mine := 0
	for _, r := range rs {
		if r.mine {
			mine++
		}
	}
	title := fmt.Sprintf("services · %d %s · %d yours", len(rs), plural(len(rs), "replica", "replicas"), mine)
	out := v.listHeader(title, head, w)
	if !v.ready {
		return v.message(out, "waiting for the agent's board…", w)
	}
	if len(rs) == 0 {
		return v.message(out, "no services: dibs serve NAME --port P -- COMMAND starts one", w)
	}
	v.cur.clamp(len(rs))
	// Under the list: the replica under the cursor, and the hint.
	foot := v.footLines(rs[v.cur.cur], w)
	from, to := v.cur.window(len(rs), h-len(out)-len(foot), 1)
	for i := from; i < to; i++ {
		out = append(out, v.svcLine(rs[i], i == v.cur.cur, wide, w))
	}
	if len(out)+len(foot) <= h {
		out = append(out, foot...)
	}
	return out
}

// svcLine draws one replica: the state in its colour (the row under the
// cursor in the cursor's), the caller's marked with a star.
func (v *servicesView) svcLine(r svcRow, cur, wide bool, w int) string {
	l, s := r.l, r.l.Service
	url := service.URL(l.Node, s.Port)
	up := "-"
	if running(r.state) && !s.Since.IsZero() {
		up = words.FormatDuration(v.now().Sub(s.Since))
	}
	gpus := "-"
	if len(l.GPUs) > 0 {
		gpus = joinInts(l.GPUs)
		if l.Partial() {
			gpus = leaseWhat(l, &v.board)
		}
	}
	state := string(r.state)
	idle := idleText(s, v.now())
	ws := svcColsNarrow
	var before, after string
	if wide {
		ws = svcColsWide
		if url == "" {
			url = "-"
		}
		before = cols(ws[:4], replicaName(l), holderName(l), l.Node, url) + " "
		after = " " + cols(ws[5:], up, fmt.Sprint(s.Restarts), gpus)
	} else {
		where := url
		if where == "" {
			where = l.Node
		}
		before = cols(ws[:3], replicaName(l), holderName(l), where) + " "
		after = " " + cols(ws[4:], up, fmt.Sprint(s.Restarts), gpus)
	}
	sw := ws[len(ws)-3]
	mark := "  "
	switch {
	case cur && r.mine:
		mark = "▸★"
	case cur:
		mark = "▸ "
	case r.mine:
		mark = " ★"
	}
	if cur {
		cell := state
		if idle != "" {
			cell += " " + idle
		}
		line := truncate(mark+before+padRight(truncate(cell, sw), sw)+after, w)
		return v.st.cellCur[kindMine].render(padRight(line, w))
	}
	var b strings.Builder
	if r.mine {
		v.st.cell[kindMine].write(&b, mark)
	} else {
		b.WriteString(mark)
	}
	b.WriteString(before)
	cell := truncate(state, sw)
	v.stateStyle(r.state).write(&b, cell)
	used := ansi.StringWidth(cell)
	if idle != "" && used+1 < sw {
		it := truncate(idle, sw-used-1)
		b.WriteByte(' ')
		v.st.statusNotice.write(&b, it)
		used += 1 + ansi.StringWidth(it)
	}
	b.WriteString(spaces(sw - used))
	b.WriteString(after)
	return truncate(b.String(), w)
}

// footLines are the lines under the list: what the row under the cursor
// does not fit (its lease, session, check, when it started, idle) and the
// keys.
func (v *servicesView) footLines(r svcRow, w int) []string {
	l, s := r.l, r.l.Service
	st := v.st
	var facts []string
	facts = append(facts, "lease "+l.ID)
	if l.Session != "" {
		facts = append(facts, "tmux "+l.Session)
	}
	if s.PID > 0 {
		facts = append(facts, fmt.Sprintf("pid %d", s.PID))
	}
	switch {
	case s.HealthCmd != "":
		facts = append(facts, "checked by --health-cmd")
	case s.Health != "":
		facts = append(facts, fmt.Sprintf("checked by GET :%d%s", s.Port, s.Health))
	case s.Port > 0:
		facts = append(facts, fmt.Sprintf("checked by TCP :%d", s.Port))
	default:
		facts = append(facts, "checked: its command runs")
	}
	if !s.Since.IsZero() {
		facts = append(facts, "started "+v.clock(s.Since))
	}
	if s.Preemptible {
		facts = append(facts, "preemptible")
	}
	out := []string{"", " " + truncate(st.bold.render(svcMark+replicaName(l))+" · "+strings.Join(facts, " · "), w-1)}
	if !s.IdleSince.IsZero() {
		out = append(out, " "+st.statusNotice.render(truncate(fmt.Sprintf("idle since %s (%s): no requests, no GPU use — dibs stop %s gives its GPUs back", v.clock(s.IdleSince), words.FormatDuration(v.now().Sub(s.IdleSince)), s.Name), w-1)))
	}
	hint := "enter shows it on the board · a attaches · x stops yours · dibs logs NAME"
	return append(out, " "+st.dim.render(truncate(hint, w-1)))
}

// stateStyle is a replica state's colour: healthy green; on its way or
// trying again yellow; stopped red; not known dim.
func (v *servicesView) stateStyle(s service.State) paint {
	st := v.st
	switch s {
	case service.Healthy:
		return st.stateAlive
	case service.Starting:
		return st.statusNotice
	case service.Unhealthy, service.Restarting:
		return st.stateSuspect
	case service.CrashLoop, service.Stopped:
		return st.stateDown
	}
	// moving, unknown (its node is away).
	return st.dim
}

// running reports whether a replica in state s has a process up, so an
// uptime means something.
func running(s service.State) bool {
	return s == service.Starting || s == service.Healthy || s == service.Unhealthy
}

// replicaName is how a replica is named in the view, its question and
// its status line: the service's name, or NAME/i for each replica of a
// service started with --replicas (Spec.Label, as dibs services says it).
func replicaName(l *lease.Lease) string {
	return l.Service.Label()
}

// idleText is "idle 3h" when the supervisor judged the service idle (no
// requests, no GPU use for the configured while), else "".
func idleText(s *service.Service, now time.Time) string {
	if s.IdleSince.IsZero() {
		return ""
	}
	return "idle " + words.FormatDuration(now.Sub(s.IdleSince))
}

// servicesStatesHelp says what the STATE words mean, for `?`.
var servicesStatesHelp = []string{
	"STATE  starting       started, not yet answering its check (within its start-up allowance)",
	"       healthy        answering its check, the listener its own",
	"       unhealthy      failing its check: restarted after a few failures in a row",
	"       restarting     its command ended or failed its check: started again after a backoff",
	"       crash-looping  restarted too often: stopped, its log kept, its owner told",
	"       moving         its node is lost: being started on another node",
	"       unknown        its node is away: the last word may be stale",
	"       idle 3h        no requests and no GPU use for that long: its owner is told",
}
