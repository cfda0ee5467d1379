// Package tui is the dibs board: a live grid of nodes × GPUs over an agent's
// API, with claim, run, extend, release and attach from the keyboard, and
// views of the queue, usage, the caller's sessions, the cluster's events
// and its services.
// It runs the same in a local terminal and inside the agent's SSH server, so
// it never reads the process's environment or terminal itself: everything it
// needs comes through Options and bubbletea messages.
//
// Only the root Model implements tea.Model. Each view (the board's grid,
// the queue, usage, sessions, events, services) is a sub-model with unexported update
// and view methods over a shared common (glow's ui, soft-serve's common).
package tui

import (
	"context"
	"fmt"
	"strings"
	"time"

	"charm.land/bubbles/v2/help"
	tea "charm.land/bubbletea/v2"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/words"
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
	Queue(ctx context.Context) (api.Queue, error)
	Cancel(ctx context.Context, id string) error
	Usage(ctx context.Context, window string) (api.UsageReport, error)
	Events(ctx context.Context, req api.EventsRequest) (api.EventList, error)
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
		id string
		// service is the name of the service whose replica id is, when
		// the release stops one (the services view's x).
		service string
		resp    api.ReleaseResponse
		err     error
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

// viewKind names the views; the number keys pick them.
type viewKind int

const (
	viewBoard viewKind = iota
	viewQueue
	viewUsage
	viewSessions
	viewEvents
	viewServices
	numViews
)

var viewNames = [numViews]string{"board", "queue", "usage", "sessions", "events", "services"}

// Model is the board: the root bubbletea model. Create it with New.
type Model struct {
	*common

	view     viewKind
	grid     *gridView
	queue    *queueView
	usage    *usageView
	sessions *sessionsView
	events   *eventsView
	services *servicesView

	backoff time.Duration
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
	c := &common{
		backend: opts.Backend,
		attach:  opts.Attach,
		now:     now,
		ctx:     ctx,
		cancel:  cancel,
		noColor: opts.NoColor,
		isDark:  true, // until the terminal says otherwise
		width:   80,
		height:  24,
		keys:    defaultKeyMap(),
		help:    help.New(),
	}
	m := &Model{
		common: c, grid: &gridView{common: c}, queue: &queueView{common: c}, usage: &usageView{common: c},
		sessions: &sessionsView{common: c}, events: &eventsView{common: c}, services: &servicesView{common: c}, backoff: backoffMin,
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
		return m, m.applyBoard(api.Board(msg))
	case watchBoardMsg:
		m.backoff = backoffMin
		if m.streamErr {
			m.streamErr = false
			m.setStatus(statusOK, "reconnected to the agent")
		}
		return m, tea.Batch(m.applyBoard(msg.board), nextBoard(msg.ch, msg.errf))
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
		m.setStatus(statusErr, fmt.Sprintf("lost the live board: %s — retrying in %s", why, words.FormatDuration(wait)))
		return m, tea.Tick(wait, func(time.Time) tea.Msg { return watchRetryMsg{} })
	case watchRetryMsg:
		return m, m.subscribe()
	case fetchedMsg:
		if msg.err == nil {
			return m, m.applyBoard(msg.board)
		}
	case queueMsg, usageMsg, eventsMsg, cancelDoneMsg:
		return m, m.listMsg(msg)
	case claimDoneMsg:
		return m, m.claimDone(msg)
	case extendDoneMsg:
		if msg.err != nil {
			m.setStatus(statusErr, "could not extend "+msg.id+": "+errText(msg.err))
			return m, nil
		}
		m.setStatus(statusOK, fmt.Sprintf("extended %s until %s (%s left)", msg.resp.ID, m.clock(msg.resp.ExpiresAt), words.FormatDuration(msg.resp.ExpiresAt.Sub(m.now()))))
		return m, m.refresh()
	case releaseDoneMsg:
		if msg.err != nil && msg.service != "" {
			m.setStatus(statusErr, "could not stop service "+msg.service+": "+errText(msg.err))
			return m, nil
		}
		if msg.err != nil {
			m.setStatus(statusErr, "could not release "+msg.id+": "+errText(msg.err))
			return m, nil
		}
		if msg.service != "" {
			m.setStatus(statusOK, fmt.Sprintf("stopped service %s (lease %s); its log stays: dibs logs %s", msg.service, msg.id, msg.service))
			return m, m.refresh()
		}
		ids := msg.resp.Released
		if len(ids) == 0 {
			ids = []string{msg.id}
		}
		m.setStatus(statusOK, "released "+strings.Join(ids, ", "))
		return m, m.refresh()
	case attachReadyMsg:
		return m, m.attachReady(msg)
	case showOnBoardMsg:
		return m, m.showOnBoard(msg)
	case attachEndedMsg:
		m.setStatus(statusInfo, "back from "+msg.session)
		return m, m.refresh()
	case tea.PasteMsg:
		if m.form != nil {
			m.form.paste(msg)
			m.formChanged()
		}
	case tea.KeyPressMsg:
		return m, tea.Batch(m.handleKey(msg), m.fetchSamples())
	case samplesMsg:
		m.hist.seed(msg, &m.board)
	case tea.MouseClickMsg:
		if m.view == viewBoard && m.form == nil && m.confirm == nil {
			m.grid.click(msg.Mouse())
		}
	case tea.MouseWheelMsg:
		if m.view == viewBoard && m.form == nil && m.confirm == nil {
			switch msg.Mouse().Button {
			case tea.MouseWheelUp:
				m.grid.moveNode(-1)
			case tea.MouseWheelDown:
				m.grid.moveNode(1)
			}
		}
	}
	return m, nil
}

// applyBoard takes a new board unless it is older than the one shown (a
// fetch that raced the stream). The board is kept escaped (api.Board.Escaped):
// process names, notes, user, node and GPU names come from every node, and
// everything the board draws is built from it. A new notice rings the
// terminal's bell and asks for a desktop notification; the open view
// refreshes what it shows from the agent.
func (m *Model) applyBoard(b api.Board) tea.Cmd {
	if m.ready && !b.GeneratedAt.IsZero() && b.GeneratedAt.Before(m.board.GeneratedAt) {
		return nil
	}
	first := !m.ready
	b = b.Escaped()
	m.hist.record(&b)
	m.board, m.ready = b, true
	m.grid.rebuild()
	m.grid.pruneSelection()
	var cmds []tea.Cmd
	if len(b.Notices) > 0 && b.Notices[0] != m.lastNotice {
		m.lastNotice = b.Notices[0]
		m.setStatus(statusNotice, b.Notices[0])
		if !first {
			cmds = append(cmds, tea.Raw(alertSequence(noticeText(b.Notices[0]))))
		}
	}
	cmds = append(cmds, m.fetchView(false), m.fetchSamples())
	return tea.Batch(cmds...)
}

// fetchView asks the agent for what the open view shows (now, or only when
// what it has is old).
func (m *Model) fetchView(now bool) tea.Cmd {
	switch m.view {
	case viewQueue:
		return m.queue.fetch(now)
	case viewUsage:
		return m.usage.fetch(now)
	case viewEvents:
		return m.events.fetch(now)
	}
	return nil
}

// listMsg hands an answer to the view that asked.
func (m *Model) listMsg(msg tea.Msg) tea.Cmd {
	switch msg := msg.(type) {
	case queueMsg:
		m.queue.got(msg)
	case usageMsg:
		m.usage.got(msg)
	case eventsMsg:
		m.events.got(msg)
	case cancelDoneMsg:
		if msg.err != nil {
			m.setStatus(statusErr, "could not withdraw "+msg.id+": "+errText(msg.err))
			return nil
		}
		m.setStatus(statusOK, "withdrew "+msg.id)
		return m.queue.fetch(true)
	}
	return nil
}
