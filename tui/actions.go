package tui

import (
	"context"
	"fmt"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
)

// This file is what the keys do at the root: the dialogs (a form, a
// question), the keys of every view (quit, help, switching views), and the
// answers to calls any view makes. Every call runs in a tea.Cmd with a
// timeout and comes back as a message; Update never waits on the agent.
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
		return nil
	case key.Matches(msg, k.Clear) && m.showHelp:
		m.closeHelp()
		return nil
	case key.Matches(msg, k.NextView):
		return m.switchView((m.view + 1) % numViews)
	case key.Matches(msg, k.PrevView):
		return m.switchView((m.view + numViews - 1) % numViews)
	}
	for v, b := range k.Views {
		if key.Matches(msg, b) {
			return m.switchView(viewKind(v))
		}
	}
	switch m.view {
	case viewQueue:
		return m.queue.update(msg)
	case viewUsage:
		return m.usage.update(msg)
	case viewSessions:
		return m.sessions.update(msg)
	case viewEvents:
		return m.events.update(msg)
	case viewServices:
		return m.services.update(msg)
	}
	return m.grid.update(msg)
}

// switchView opens a view and asks for what it shows.
func (m *Model) switchView(v viewKind) tea.Cmd {
	m.view = v
	m.closeHelp()
	return m.fetchView(true)
}

func (m *Model) confirmKey(msg tea.KeyPressMsg) tea.Cmd {
	fk := defaultFormKeyMap()
	switch {
	case key.Matches(msg, fk.Yes):
		q := m.confirm
		m.confirm = nil
		if q.service != "" {
			return m.ask("stopping service "+q.service+"…", func(ctx context.Context, be Backend) tea.Msg {
				resp, err := be.Release(ctx, api.ReleaseRequest{IDs: []string{q.id}})
				return releaseDoneMsg{id: q.id, service: q.service, resp: resp, err: err}
			})
		}
		if q.cancel {
			return m.ask("withdrawing "+q.id+"…", func(ctx context.Context, be Backend) tea.Msg {
				return cancelDoneMsg{id: q.id, err: be.Cancel(ctx, q.id)}
			})
		}
		return m.ask("releasing "+q.id+"…", func(ctx context.Context, be Backend) tea.Msg {
			resp, err := be.Release(ctx, api.ReleaseRequest{IDs: []string{q.id}})
			return releaseDoneMsg{id: q.id, resp: resp, err: err}
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
			m.grid.filter = ""
			m.grid.rebuild()
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
		m.grid.filter = m.form.value("filter")
		m.grid.rebuild()
	}
}

func (m *Model) submitForm(f *form) tea.Cmd {
	switch f.kind {
	case formFilter:
		m.form = nil
		m.grid.filter = f.value("filter")
		m.grid.rebuild()
		if m.grid.filter != "" {
			m.setStatus(statusInfo, fmt.Sprintf("filter %q: %d of %d nodes — / changes it, esc clears it", m.grid.filter, len(m.grid.views), m.grid.sum.nodes))
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
	g := m.grid
	if len(msg.req.GPUs) > 0 && msg.req.Node == g.selNode {
		g.sel, g.selNode = nil, ""
	}
	if len(r.GPUs) > 0 {
		g.curName, g.curGPU, g.curMIG = r.Node, r.GPUs[0], r.MIG
	}
	gpus := leaseWhat(&lease.Lease{Node: r.Node, GPUs: r.GPUs, MIG: r.MIG, MemMiB: r.MemMiB}, &m.board)
	cvd := r.CUDAVisibleDevices
	if cvd == "" {
		cvd = joinInts(r.GPUs)
	}
	// What the person must know of the grant comes after: a time cut
	// short by a booking, a lease that borrows beyond their quota.
	note := ""
	switch {
	case r.CutBy != "":
		note = fmt.Sprintf(" · cut short: booking %s begins then", r.CutBy)
	case r.Borrowed:
		note = " · borrowed beyond your quota: may be preempted"
	}
	if msg.req.Run != nil {
		sess := r.Session
		if sess == "" {
			sess = "its session"
		}
		m.setStatus(statusOK, fmt.Sprintf("started %s in tmux %s: %s until %s — a attaches%s", r.ID, sess, gpus, m.clock(r.ExpiresAt), note))
	} else {
		m.setStatus(statusOK, fmt.Sprintf("claimed %s: %s until %s — CUDA_VISIBLE_DEVICES=%s%s", r.ID, gpus, m.clock(r.ExpiresAt), cvd, note))
	}
	return m.refresh()
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
