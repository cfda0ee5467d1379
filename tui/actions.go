package tui

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
)

// This file is what the keys and the mouse do, and the calls to the agent
// they make. Every call runs in a tea.Cmd with a timeout and comes back as a
// message; Update never waits on the agent.
func (m *Model) handleKey(msg tea.KeyPressMsg) tea.Cmd {
	if msg.String() == "ctrl+c" {
		return m.quit()
	}
	switch {
	case m.confirm != nil:
		return m.confirmKey(msg)
	case m.form != nil:
		return m.formKey(msg)
	}
	k := m.keys
	switch {
	case key.Matches(msg, k.Quit):
		return m.quit()
	case key.Matches(msg, k.Help):
		m.showHelp = !m.showHelp
		m.help.ShowAll = m.showHelp
	case key.Matches(msg, k.Clear):
		switch {
		case m.showHelp:
			m.showHelp, m.help.ShowAll = false, false
		case len(m.sel) > 0:
			m.sel, m.selNode = nil, ""
			m.setStatus(statusInfo, "selection cleared")
		case m.filter != "":
			m.filter = ""
			m.rebuild()
			m.setStatus(statusInfo, "filter cleared")
		}
	case key.Matches(msg, k.Up):
		m.moveNode(-1)
	case key.Matches(msg, k.Down):
		m.moveNode(1)
	case key.Matches(msg, k.Left):
		m.moveCol(-1)
	case key.Matches(msg, k.Right):
		m.moveCol(1)
	case key.Matches(msg, k.Select):
		m.toggleSelect()
	case key.Matches(msg, k.Claim):
		m.openClaim(false)
	case key.Matches(msg, k.Run):
		m.openClaim(true)
	case key.Matches(msg, k.Extend):
		m.openExtend()
	case key.Matches(msg, k.Release):
		m.openRelease()
	case key.Matches(msg, k.Attach):
		return m.startAttach()
	case key.Matches(msg, k.Mine):
		m.onlyMine = !m.onlyMine
		m.rebuild()
		if m.onlyMine {
			m.setStatus(statusInfo, "showing only nodes where you hold GPUs — m shows all")
		} else {
			m.setStatus(statusInfo, "showing all nodes")
		}
	case key.Matches(msg, k.Filter):
		m.showHelp, m.help.ShowAll = false, false
		m.form = newFilterForm(m.st.input, m.filter)
	}
	return nil
}

func (m *Model) quit() tea.Cmd {
	m.cancel()
	return tea.Quit
}

func (m *Model) toggleSelect() {
	n, g := m.cursorGPU()
	if g == nil {
		return
	}
	if i := slices.Index(m.sel, g.Index); i >= 0 && n.Name == m.selNode {
		m.sel = slices.Delete(m.sel, i, i+1)
		m.setStatus(statusInfo, selectionText(m.selNode, m.sel))
		return
	}
	if !g.Free(n.State) {
		m.setStatus(statusErr, fmt.Sprintf("GPU %d on %s is not free: only free GPUs can be selected", g.Index, n.Name))
		return
	}
	if n.Name != m.selNode {
		m.sel, m.selNode = nil, n.Name
	}
	m.sel = append(m.sel, g.Index)
	slices.Sort(m.sel)
	m.setStatus(statusInfo, selectionText(m.selNode, m.sel))
}

func selectionText(node string, sel []int) string {
	if len(sel) == 0 {
		return "nothing selected"
	}
	return fmt.Sprintf("selected GPUs %s on %s — c claims them, r runs on them, esc clears", joinInts(sel), node)
}

func (m *Model) openClaim(run bool) {
	n, _ := m.cursorGPU()
	if n == nil {
		m.setStatus(statusErr, "no node to claim on yet")
		return
	}
	node, gpus := n.Name, []int(nil)
	if len(m.sel) > 0 {
		node, gpus = m.selNode, slices.Clone(m.sel)
	} else if n.State != api.NodeAlive {
		m.setStatus(statusErr, fmt.Sprintf("%s is %s: its GPUs cannot be claimed now — move to a live node", n.Name, n.State))
		return
	}
	m.showHelp, m.help.ShowAll = false, false
	m.form = newClaimForm(m.st.input, run, node, gpus)
}

// cursorLease returns the lease on the GPU under the cursor; on a GPU held
// in parts (MIG instances, budgets), the caller's part, else the first.
func (m *Model) cursorLease() (*api.Node, *api.GPU, *lease.Lease) {
	n, g := m.cursorGPU()
	if g == nil {
		return n, g, nil
	}
	if g.Lease == nil && len(g.Shares) > 0 {
		for i := range g.Shares {
			if g.Shares[i].UID == m.board.You.UID {
				return n, g, &g.Shares[i]
			}
		}
		return n, g, &g.Shares[0]
	}
	return n, g, g.Lease
}

func (m *Model) openExtend() {
	n, g, l := m.cursorLease()
	if g == nil {
		return
	}
	if l == nil {
		m.setStatus(statusErr, fmt.Sprintf("GPU %d on %s has no lease to extend", g.Index, n.Name))
		return
	}
	m.showHelp, m.help.ShowAll = false, false
	ends := "ends " + m.clock(l.ExpiresAt)
	if left := l.ExpiresAt.Sub(m.now()); left > 0 {
		ends += " (" + lease.FormatDuration(left) + " left)"
	} else {
		ends = "overdue by " + lease.FormatDuration(-left)
	}
	m.form = newExtendForm(m.st.input, l, ends)
}

func (m *Model) openRelease() {
	n, g, l := m.cursorLease()
	if g == nil {
		return
	}
	if l == nil {
		m.setStatus(statusErr, fmt.Sprintf("GPU %d on %s has no lease to release", g.Index, n.Name))
		return
	}
	c := &confirm{id: l.ID, title: "release " + l.ID + "?"}
	who := "yours"
	if l.UID != m.board.You.UID {
		who = "held by " + holderName(l)
	}
	c.lines = append(c.lines, fmt.Sprintf("%s on %s, %s", gpuList(l.GPUs), l.Node, who))
	if l.Session != "" {
		c.lines = append(c.lines, "its tmux session "+l.Session+" ends too")
	}
	c.lines = append(c.lines, "y releases · n keeps it")
	m.showHelp, m.help.ShowAll = false, false
	m.confirm = c
}

func (m *Model) confirmKey(msg tea.KeyPressMsg) tea.Cmd {
	fk := defaultFormKeyMap()
	switch {
	case key.Matches(msg, fk.Yes):
		id := m.confirm.id
		m.confirm = nil
		return m.ask("releasing "+id+"…", func(ctx context.Context, be Backend) tea.Msg {
			resp, err := be.Release(ctx, api.ReleaseRequest{IDs: []string{id}})
			return releaseDoneMsg{id: id, resp: resp, err: err}
		})
	case key.Matches(msg, fk.No):
		m.setStatus(statusInfo, "kept "+m.confirm.id)
		m.confirm = nil
	}
	return nil
}

func (m *Model) formKey(msg tea.KeyPressMsg) tea.Cmd {
	f := m.form
	submit, cancel := f.update(msg)
	switch {
	case cancel:
		m.form = nil
		if f.kind == formFilter {
			m.filter = ""
			m.rebuild()
		}
		return nil
	case submit:
		return m.submitForm(f)
	}
	m.formChanged()
	return nil
}

// formChanged applies a filter as it is typed.
func (m *Model) formChanged() {
	if m.form != nil && m.form.kind == formFilter {
		m.filter = m.form.value("filter")
		m.rebuild()
	}
}

func (m *Model) submitForm(f *form) tea.Cmd {
	switch f.kind {
	case formFilter:
		m.form = nil
		m.filter = f.value("filter")
		m.rebuild()
		if m.filter != "" {
			m.setStatus(statusInfo, fmt.Sprintf("filter %q: %d of %d nodes — / changes it, esc clears it", m.filter, len(m.views), m.sum.nodes))
		}
		return nil
	case formExtend:
		req, err := f.extendRequest()
		if err != nil {
			m.setStatus(statusErr, errText(err))
			return nil
		}
		m.form = nil
		return m.ask("extending "+req.ID+"…", func(ctx context.Context, be Backend) tea.Msg {
			resp, err := be.Extend(ctx, req)
			return extendDoneMsg{id: req.ID, resp: resp, err: err}
		})
	}
	req, err := f.claimRequest()
	if err != nil {
		m.setStatus(statusErr, errText(err))
		return nil
	}
	m.form = nil
	return m.ask("asking "+req.Node+"…", func(ctx context.Context, be Backend) tea.Msg {
		resp, err := be.Claim(ctx, req)
		return claimDoneMsg{req: req, resp: resp, err: err}
	})
}

// ask runs one call to the agent off the update loop, bounded by
// actionTimeout, saying what it is doing in the status line meanwhile.
func (m *Model) ask(doing string, call func(context.Context, Backend) tea.Msg) tea.Cmd {
	be, ctx := m.backend, m.ctx
	if be == nil {
		m.setStatus(statusErr, "no agent to talk to")
		return nil
	}
	m.setStatus(statusInfo, doing)
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, actionTimeout)
		defer cancel()
		return call(ctx, be)
	}
}

func (m *Model) claimDone(msg claimDoneMsg) tea.Cmd {
	verb := "claim"
	if msg.req.Run != nil {
		verb = "start the run"
	}
	if msg.err != nil {
		m.setStatus(statusErr, "could not "+verb+": "+errText(msg.err))
		return nil
	}
	r := msg.resp
	if len(msg.req.GPUs) > 0 && msg.req.Node == m.selNode {
		m.sel, m.selNode = nil, ""
	}
	if len(r.GPUs) > 0 {
		m.curName, m.curGPU = r.Node, r.GPUs[0]
	}
	gpus := gpuList(r.GPUs)
	cvd := r.CUDAVisibleDevices
	if cvd == "" {
		cvd = joinInts(r.GPUs)
	}
	if msg.req.Run != nil {
		sess := r.Session
		if sess == "" {
			sess = "its session"
		}
		m.setStatus(statusOK, fmt.Sprintf("started %s in tmux %s: %s until %s — a attaches", r.ID, sess, gpus, m.clock(r.ExpiresAt)))
	} else {
		m.setStatus(statusOK, fmt.Sprintf("claimed %s: %s until %s — CUDA_VISIBLE_DEVICES=%s", r.ID, gpus, m.clock(r.ExpiresAt), cvd))
	}
	return m.refresh()
}

// startAttach attaches to the session of the lease under the cursor when it
// is the caller's, else to the caller's latest session (the agent picks it).
func (m *Model) startAttach() tea.Cmd {
	id := ""
	if _, _, l := m.cursorLease(); l != nil && l.UID == m.board.You.UID {
		if l.Session == "" {
			m.setStatus(statusErr, l.ID+" has no tmux session: it was claimed without a command (r claims and starts one)")
			return nil
		}
		id = l.ID
	}
	what := id
	if what == "" {
		what = "your latest session"
	}
	return m.ask("finding "+what+"…", func(ctx context.Context, be Backend) tea.Msg {
		resp, err := be.Attach(ctx, id)
		return attachReadyMsg{id: id, resp: resp, err: err}
	})
}

func (m *Model) attachReady(msg attachReadyMsg) tea.Cmd {
	if msg.err != nil {
		what := msg.id
		if what == "" {
			what = "your session"
		}
		m.setStatus(statusErr, "could not attach to "+what+": "+errText(msg.err))
		return nil
	}
	argv := msg.resp.Command
	if len(argv) == 0 {
		m.setStatus(statusErr, "the agent gave no way to attach to "+msg.resp.Lease.ID)
		return nil
	}
	if m.attach == nil {
		m.setStatus(statusInfo, "to attach, run: "+shellJoin(argv))
		return nil
	}
	sess := msg.resp.Lease.Session
	if sess == "" {
		sess = msg.resp.Lease.ID
	}
	m.setStatus(statusInfo, "attaching to "+sess+" — detach with ctrl+b d to come back here")
	// The program runs the attach with the terminal and only then takes the
	// next message, so attachEndedMsg arrives when the person is back.
	return tea.Sequence(m.attach(argv), func() tea.Msg { return attachEndedMsg{session: sess} })
}

// refresh fetches the board once after an action, so the result shows even
// while the stream is reconnecting.
func (m *Model) refresh() tea.Cmd {
	if m.backend == nil {
		return nil
	}
	be, ctx := m.backend, m.ctx
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, actionTimeout)
		defer cancel()
		b, err := be.Board(ctx)
		return fetchedMsg{board: b, err: err}
	}
}

func (m *Model) handleClick(mo tea.Mouse) {
	if mo.Button != tea.MouseLeft || m.form != nil || m.confirm != nil {
		return
	}
	for _, h := range m.hits {
		if mo.Y < h.y || mo.Y >= h.y+h.h || mo.X < h.x0 || mo.X >= h.x1 || h.node >= len(m.views) {
			continue
		}
		m.curNode = h.node
		if h.col >= 0 {
			m.curCol = h.col
		} else {
			m.curCol = min(m.curCol, max(len(m.views[h.node].cells)-1, 0))
		}
		m.syncCursor()
		return
	}
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

// shellJoin prints an argv so it can be pasted into a shell.
func shellJoin(argv []string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && !strings.ContainsAny(a, " \t\n'\"\\$`;&|<>(){}*?[]#~!") {
			out[i] = a
			continue
		}
		out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(out, " ")
}
