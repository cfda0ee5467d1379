// Package tui is the dibs board: a live grid of nodes × GPUs over an agent's
// API, with claim, run, extend, release and attach from the keyboard. It runs
// the same in a local terminal and inside the agent's SSH server, so it never
// reads the process's environment or terminal itself: everything it needs
// comes through Options and bubbletea messages.
package tui

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"charm.land/bubbles/v2/help"
	tea "charm.land/bubbletea/v2"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/lease/termsafe"
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
	attachEndedMsg struct{ session string }
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
	y, h, x0, x1 int
	node, col    int
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
	footer  struct {
		key footerKey
		val string
	}
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
	case tea.EnvMsg:
		// The program's environment is the client's (over SSH too): a
		// NO_COLOR there wins even if the caller did not pass NoColor.
		if msg.Getenv("NO_COLOR") != "" && !m.noColor {
			m.noColor = true
			m.setStyles(m.isDark)
		}
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
	case attachEndedMsg:
		m.setStatus(statusInfo, "back from "+msg.session)
		return m, m.refresh()
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

// setStatus shows s in the status line. Status text quotes agents' errors,
// notices and names from every node, so it is escaped (termsafe) here, the
// one way into the status line.
func (m *Model) setStatus(k statusKind, s string) {
	m.statusKind, m.status = k, termsafe.String(s)
}

// applyBoard takes a new board unless it is older than the one shown (a
// fetch that raced the stream). The board is kept escaped (api.Board.Escaped):
// process names, notes, user, node and GPU names come from every node, and
// everything the board draws is built from it.
func (m *Model) applyBoard(b api.Board) {
	if m.ready && !b.GeneratedAt.IsZero() && b.GeneratedAt.Before(m.board.GeneratedAt) {
		return
	}
	b = b.Escaped()
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
