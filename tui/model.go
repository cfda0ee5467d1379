// Package tui is the dibs board: a live grid of nodes × GPUs over an agent's
// API, with claim, run, extend, release and attach from the keyboard. It runs
// the same in a local terminal and inside the agent's SSH server, so it never
// reads the process's environment or terminal itself: everything it needs
// comes through Options and bubbletea messages.
package tui

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/help"
	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
)

// Backend is what the board needs from an agent. *api.Client satisfies it;
// tests and `dibs demo` can pass their own.
type Backend interface {
	Board(ctx context.Context) (api.Board, error)
	Watch(ctx context.Context) (<-chan api.Board, func() error)
	Claim(ctx context.Context, req api.ClaimRequest) (api.ClaimResponse, error)
	Release(ctx context.Context, req api.ReleaseRequest) (api.ReleaseResponse, error)
	Extend(ctx context.Context, req api.ExtendRequest) (api.ClaimResponse, error)
	Attach(ctx context.Context, id string) (api.AttachResponse, error)
}

var _ Backend = (*api.Client)(nil)

// Options configure a board. The caller reads the environment (NO_COLOR,
// the terminal) because over SSH only it knows the client's.
type Options struct {
	// Backend is the agent. Nil draws only boards sent as BoardMsg.
	Backend Backend
	// Attach runs the attach argv (api.AttachResponse.Command) with the
	// terminal: locally a tea.ExecProcess, over SSH tmux attach in the SSH
	// PTY. Nil shows the command to run in the status line instead.
	Attach func(argv []string) tea.Cmd
	// NoColor draws without any colour or text attribute (NO_COLOR).
	NoColor bool
	// Now is the clock for "time left"; nil means time.Now.
	Now func() time.Time
	// Context, when set, ends the board's subscription and any call in
	// flight when it is done (the SSH session closed). Nil: they end when
	// the person quits.
	Context context.Context
}

// BoardMsg delivers a new board. The board's own subscription produces
// them; the SSH server or a test may Send one too.
type BoardMsg api.Board

// Internal messages.
type (
	watchBoardMsg struct {
		board api.Board
		ch    <-chan api.Board
		errf  func() error
	}
	watchEndedMsg struct{ err error }
	watchRetryMsg struct{}
	fetchedMsg    struct {
		board api.Board
		err   error
	}
	claimDoneMsg struct {
		req  api.ClaimRequest
		resp api.ClaimResponse
		err  error
	}
	extendDoneMsg struct {
		id   string
		resp api.ClaimResponse
		err  error
	}
	releaseDoneMsg struct {
		id   string
		resp api.ReleaseResponse
		err  error
	}
	attachReadyMsg struct {
		id   string
		resp api.AttachResponse
		err  error
	}
)

// actionTimeout bounds one call to the agent so a hung agent shows as an
// error instead of a board that never answers.
const actionTimeout = 30 * time.Second

const (
	backoffMin = time.Second
	backoffMax = 30 * time.Second
)

type statusKind int

const (
	statusInfo statusKind = iota
	statusOK
	statusErr
	statusNotice
)

// common is what every part of the board shares for one session.
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
}

// confirm is the y/n question before a release.
type confirm struct {
	id    string
	title string
	lines []string
}

// hit maps a rectangle of the last rendered frame to a GPU (col >= 0) or a
// node header (col < 0), for mouse clicks.
type hit struct {
	y, x0, x1 int
	node, col int
}

// Model is the board: the root bubbletea model. Create it with New.
type Model struct {
	common

	keys  keyMap
	help  help.Model
	board api.Board
	ready bool // a board has arrived

	views []nodeView
	sum   summary

	curNode, curCol int    // into views and views[curNode].cells
	curName         string // the cursor's identity, kept across boards
	curGPU          int
	top             int // first node block drawn

	selNode string
	sel     []int // GPU indices on selNode, sorted

	onlyMine bool
	filter   string

	form     *form
	confirm  *confirm
	showHelp bool

	status     string
	statusKind statusKind
	lastNotice string
	streamErr  bool

	backoff time.Duration
	hits    []hit
}

// New returns a board. Run it with tea.NewProgram(tui.New(opts)).
func New(opts Options) *Model {
	now := opts.Now
	if now == nil {
		now = time.Now
	}
	parent := opts.Context
	if parent == nil {
		parent = context.Background()
	}
	ctx, cancel := context.WithCancel(parent)
	m := &Model{
		common: common{
			backend: opts.Backend,
			attach:  opts.Attach,
			now:     now,
			ctx:     ctx,
			cancel:  cancel,
			noColor: opts.NoColor,
			isDark:  true, // until the terminal says otherwise
			width:   80,
			height:  24,
		},
		keys:    defaultKeyMap(),
		help:    help.New(),
		backoff: backoffMin,
	}
	m.setStyles(true)
	return m
}

func (m *Model) setStyles(isDark bool) {
	m.isDark = isDark
	m.st = newStyles(isDark, m.noColor)
	m.help.Styles = m.st.help
	if m.form != nil {
		for i := range m.form.fields {
			m.form.fields[i].in.SetStyles(m.st.input)
		}
	}
}

// Init subscribes to the agent's board stream and asks the terminal for its
// background so colours suit it.
func (m *Model) Init() tea.Cmd {
	return tea.Batch(m.subscribe(), tea.RequestBackgroundColor)
}

// subscribe opens the board stream and waits for its first board.
func (m *Model) subscribe() tea.Cmd {
	if m.backend == nil {
		return nil
	}
	be, ctx := m.backend, m.ctx
	return func() tea.Msg {
		ch, errf := be.Watch(ctx)
		return nextBoard(ch, errf)()
	}
}

// nextBoard waits for the next board on an open stream; Update re-arms it
// after each one, so the board updates without polling.
func nextBoard(ch <-chan api.Board, errf func() error) tea.Cmd {
	return func() tea.Msg {
		b, ok := <-ch
		if !ok {
			return watchEndedMsg{err: errf()}
		}
		return watchBoardMsg{board: b, ch: ch, errf: errf}
	}
}

// Update handles one message.
func (m *Model) Update(msg tea.Msg) (tea.Model, tea.Cmd) {
	switch msg := msg.(type) {
	case tea.WindowSizeMsg:
		m.width, m.height = max(msg.Width, 1), max(msg.Height, 1)
	case tea.BackgroundColorMsg:
		m.setStyles(msg.IsDark())
	case BoardMsg:
		m.applyBoard(api.Board(msg))
	case watchBoardMsg:
		m.backoff = backoffMin
		if m.streamErr {
			m.streamErr = false
			m.setStatus(statusOK, "reconnected to the agent")
		}
		m.applyBoard(msg.board)
		return m, nextBoard(msg.ch, msg.errf)
	case watchEndedMsg:
		if m.ctx.Err() != nil {
			return m, nil
		}
		wait := m.backoff
		m.backoff = min(m.backoff*2, backoffMax)
		why := "the board stream ended"
		if msg.err != nil {
			why = errText(msg.err)
		}
		m.streamErr = true
		m.setStatus(statusErr, fmt.Sprintf("lost the live board: %s — retrying in %s", why, lease.FormatDuration(wait)))
		return m, tea.Tick(wait, func(time.Time) tea.Msg { return watchRetryMsg{} })
	case watchRetryMsg:
		return m, m.subscribe()
	case fetchedMsg:
		if msg.err == nil {
			m.applyBoard(msg.board)
		}
	case claimDoneMsg:
		return m, m.claimDone(msg)
	case extendDoneMsg:
		if msg.err != nil {
			m.setStatus(statusErr, "could not extend "+msg.id+": "+errText(msg.err))
			return m, nil
		}
		m.setStatus(statusOK, fmt.Sprintf("extended %s until %s (%s left)", msg.resp.ID, m.clock(msg.resp.ExpiresAt), lease.FormatDuration(msg.resp.ExpiresAt.Sub(m.now()))))
		return m, m.refresh()
	case releaseDoneMsg:
		if msg.err != nil {
			m.setStatus(statusErr, "could not release "+msg.id+": "+errText(msg.err))
			return m, nil
		}
		ids := msg.resp.Released
		if len(ids) == 0 {
			ids = []string{msg.id}
		}
		m.setStatus(statusOK, "released "+strings.Join(ids, ", "))
		return m, m.refresh()
	case attachReadyMsg:
		return m, m.attachReady(msg)
	case tea.PasteMsg:
		if m.form != nil {
			m.form.paste(msg)
			m.formChanged()
		}
	case tea.KeyPressMsg:
		return m, m.handleKey(msg)
	case tea.MouseClickMsg:
		m.handleClick(msg.Mouse())
	case tea.MouseWheelMsg:
		if m.form == nil && m.confirm == nil {
			switch msg.Mouse().Button {
			case tea.MouseWheelUp:
				m.moveNode(-1)
			case tea.MouseWheelDown:
				m.moveNode(1)
			}
		}
	}
	return m, nil
}

func (m *Model) setStatus(k statusKind, s string) {
	m.statusKind, m.status = k, s
}

// applyBoard takes a new board unless it is older than the one shown (a
// fetch that raced the stream).
func (m *Model) applyBoard(b api.Board) {
	if m.ready && !b.GeneratedAt.IsZero() && b.GeneratedAt.Before(m.board.GeneratedAt) {
		return
	}
	m.board, m.ready = b, true
	m.rebuild()
	m.pruneSelection()
	if len(b.Notices) > 0 && b.Notices[0] != m.lastNotice {
		m.lastNotice = b.Notices[0]
		m.setStatus(statusNotice, b.Notices[0])
	}
}

// rebuild recomputes the grid from the board and keeps the cursor on the
// same GPU when it is still shown.
func (m *Model) rebuild() {
	m.views, m.sum = buildViews(&m.board, m.filter, m.onlyMine)
	if len(m.views) == 0 {
		m.curNode, m.curCol = 0, 0
		return
	}
	ni := slices.IndexFunc(m.views, func(v nodeView) bool { return v.name == m.curName })
	if ni < 0 {
		ni = min(m.curNode, len(m.views)-1)
	}
	m.curNode = ni
	cells := m.views[ni].cells
	ci := slices.IndexFunc(cells, func(c cellView) bool { return c.gpu == m.curGPU })
	if ci < 0 {
		ci = min(m.curCol, max(len(cells)-1, 0))
	}
	m.curCol = ci
	m.syncCursor()
}

func (m *Model) syncCursor() {
	if len(m.views) == 0 {
		return
	}
	v := &m.views[m.curNode]
	m.curName = v.name
	if m.curCol < len(v.cells) {
		m.curGPU = v.cells[m.curCol].gpu
	}
}

// cursorGPU returns the node and GPU under the cursor, nil when none.
func (m *Model) cursorGPU() (*api.Node, *api.GPU) {
	if len(m.views) == 0 {
		return nil, nil
	}
	n := &m.board.Nodes[m.views[m.curNode].idx]
	if m.curCol >= len(n.GPUs) {
		return n, nil
	}
	return n, &n.GPUs[m.curCol]
}

func (m *Model) moveNode(d int) {
	if len(m.views) == 0 {
		return
	}
	m.curNode = min(max(m.curNode+d, 0), len(m.views)-1)
	m.curCol = min(m.curCol, max(len(m.views[m.curNode].cells)-1, 0))
	m.syncCursor()
}

func (m *Model) moveCol(d int) {
	if len(m.views) == 0 {
		return
	}
	m.curCol = min(max(m.curCol+d, 0), max(len(m.views[m.curNode].cells)-1, 0))
	m.syncCursor()
}

// pruneSelection drops selected GPUs that are gone or no longer free.
func (m *Model) pruneSelection() {
	if len(m.sel) == 0 {
		return
	}
	var n *api.Node
	for i := range m.board.Nodes {
		if m.board.Nodes[i].Name == m.selNode {
			n = &m.board.Nodes[i]
		}
	}
	m.sel = slices.DeleteFunc(m.sel, func(idx int) bool {
		if n == nil {
			return true
		}
		for i := range n.GPUs {
			if n.GPUs[i].Index == idx {
				return !n.GPUs[i].Free(n.State)
			}
		}
		return true
	})
}

func (m *Model) isSelected(node string, gpu int) bool {
	return node == m.selNode && slices.Contains(m.sel, gpu)
}

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

// cursorLease returns the lease on the GPU under the cursor.
func (m *Model) cursorLease() (*api.Node, *api.GPU, *lease.Lease) {
	n, g := m.cursorGPU()
	if g == nil {
		return n, g, nil
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
	m.form = newExtendForm(m.st.input, l)
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
	c.lines = append(c.lines, fmt.Sprintf("GPUs %s on %s, %s", joinInts(l.GPUs), l.Node, who))
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
		m.setStatus(statusInfo, "releasing "+id+"…")
		be, ctx := m.backend, m.ctx
		if be == nil {
			m.setStatus(statusErr, "no agent to talk to")
			return nil
		}
		return func() tea.Msg {
			ctx, cancel := context.WithTimeout(ctx, actionTimeout)
			defer cancel()
			resp, err := be.Release(ctx, api.ReleaseRequest{IDs: []string{id}})
			return releaseDoneMsg{id: id, resp: resp, err: err}
		}
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
	be, ctx := m.backend, m.ctx
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
		if be == nil {
			m.setStatus(statusErr, "no agent to talk to")
			return nil
		}
		m.setStatus(statusInfo, "extending "+req.ID+"…")
		return func() tea.Msg {
			ctx, cancel := context.WithTimeout(ctx, actionTimeout)
			defer cancel()
			resp, err := be.Extend(ctx, req)
			return extendDoneMsg{id: req.ID, resp: resp, err: err}
		}
	}
	req, err := f.claimRequest()
	if err != nil {
		m.setStatus(statusErr, errText(err))
		return nil
	}
	m.form = nil
	if be == nil {
		m.setStatus(statusErr, "no agent to talk to")
		return nil
	}
	m.setStatus(statusInfo, "asking "+req.Node+"…")
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, actionTimeout)
		defer cancel()
		resp, err := be.Claim(ctx, req)
		return claimDoneMsg{req: req, resp: resp, err: err}
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
	gpus := fmt.Sprintf("GPU %s", joinInts(r.GPUs))
	if len(r.GPUs) > 1 {
		gpus = "GPUs " + joinInts(r.GPUs)
	}
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
	if m.backend == nil {
		m.setStatus(statusErr, "no agent to talk to")
		return nil
	}
	be, ctx := m.backend, m.ctx
	what := id
	if what == "" {
		what = "your latest session"
	}
	m.setStatus(statusInfo, "finding "+what+"…")
	return func() tea.Msg {
		ctx, cancel := context.WithTimeout(ctx, actionTimeout)
		defer cancel()
		resp, err := be.Attach(ctx, id)
		return attachReadyMsg{id: id, resp: resp, err: err}
	}
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
	m.setStatus(statusInfo, "attached to "+msg.resp.Lease.Session+" — detach with ctrl+b d to come back")
	return m.attach(argv)
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
		if mo.Y != h.y || mo.X < h.x0 || mo.X >= h.x1 || h.node >= len(m.views) {
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

// clock prints a lease end as people read it: 18:40 today, else with the day.
func (m *Model) clock(t time.Time) string {
	now := m.now()
	t = t.In(now.Location())
	y1, m1, d1 := t.Date()
	y2, m2, d2 := now.Date()
	if y1 == y2 && m1 == m2 && d1 == d2 {
		return t.Format("15:04")
	}
	return t.Format("Mon 15:04")
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
