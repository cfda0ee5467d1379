package events

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/event"
)

// Fanout carries each notice from the node where its event happened to
// every live node, whose agent shows it in the person's tmux sessions and
// on their boards there, and posts it to their webhook if that node keeps
// it. It runs on goroutines of its own: an event's recorder never waits for
// the network.
//
// Delivery queues per user: each user with notices pending has a worker of
// their own that sends them in order, one at a time. A user's tmux server
// is theirs to break (a socket that never answers), and one notice's
// delivery may take up to sendTimeout; queued per user, that slows only
// their own notices, never anyone else's. Each user's queue is bounded
// (maxPerUser), and so is the number of users waiting (maxUsers): past
// either, a notice is dropped with a warning.
type Fanout struct {
	nodes func() []string
	send  func(ctx context.Context, node string, n event.Notice) error
	log   *slog.Logger

	mu      sync.Mutex
	users   map[string]*noticeQueue // users with notices pending or in flight
	running bool                    // Run was called: workers may start
	closed  bool                    // Close was called: no new notices
	workers sync.WaitGroup
	// ctx ends every send once Close has waited closeWait: a stopping
	// agent does not wait on a user's mute tmux server for long.
	ctx    context.Context
	cancel context.CancelFunc
}

// noticeQueue is one user's notices waiting to be sent, oldest first.
type noticeQueue struct {
	pending []event.Notice
	working bool // a worker sends them
}

const (
	// sendTimeout bounds one node's delivery of one notice.
	sendTimeout = 3 * time.Second
	// maxPerUser bounds the notices one user may have waiting.
	maxPerUser = 256
	// maxUsers bounds how many users may have notices waiting at once.
	maxUsers = 4096
	// closeWait is how long Close lets the notices queued so far go out
	// before it cuts the rest short.
	closeWait = 5 * time.Second
)

// NewFanout sends each notice to nodes() with send; Run starts it.
func NewFanout(nodes func() []string, send func(ctx context.Context, node string, n event.Notice) error, log *slog.Logger) *Fanout {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	return &Fanout{nodes: nodes, send: send, log: log, users: map[string]*noticeQueue{}, ctx: ctx, cancel: cancel}
}

// Notice queues n for every node, behind the notices of the same user
// only; a full queue drops it, with a warning. It never blocks.
func (f *Fanout) Notice(n event.Notice) {
	if why := f.queue(n); why != "" {
		f.log.Warn("notices: "+why+"; dropping one", "user", n.User, "kind", n.Kind)
	}
}

// queue queues n, or says why it drops it (the warning is written after
// the lock).
func (f *Fanout) queue(n event.Notice) (dropped string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.closed {
		return "stopping"
	}
	q := f.users[n.User]
	if q == nil {
		if len(f.users) >= maxUsers {
			return "too many users waiting"
		}
		q = &noticeQueue{}
		f.users[n.User] = q
	}
	if len(q.pending) >= maxPerUser {
		return "this user's queue is full"
	}
	q.pending = append(q.pending, n)
	f.startLocked(n.User, q)
	return ""
}

// startLocked starts user's worker unless one runs or Run has not been
// called yet. Callers hold mu.
func (f *Fanout) startLocked(user string, q *noticeQueue) {
	if !f.running || q.working || len(q.pending) == 0 {
		return
	}
	q.working = true
	f.workers.Add(1)
	go f.work(user, q)
}

// Run starts the senders: the notices queued so far go out now.
func (f *Fanout) Run() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.running = true
	for user, q := range f.users {
		f.startLocked(user, q)
	}
}

// Close stops taking notices and returns once those queued so far are
// sent, or after closeWait, when the sends still going are cut short and
// the notices still waiting dropped.
func (f *Fanout) Close() {
	f.stopTaking()
	done := make(chan struct{})
	go func() {
		f.workers.Wait()
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(closeWait):
		f.log.Warn("notices: stopping with notices still going out; dropping them")
		f.cancel()
		<-done
	}
	f.cancel()
}

// work sends user's notices in order until none is left, then forgets the
// user.
func (f *Fanout) work(user string, q *noticeQueue) {
	defer f.workers.Done()
	for {
		n, ok := f.next(user, q)
		if !ok {
			return
		}
		if f.ctx.Err() != nil {
			continue // Close cut the rest short
		}
		f.deliver(n)
	}
}

// stopTaking marks the fanout closed and, if it never ran, starts a worker
// for each user whose notices wait, so Close has them sent.
func (f *Fanout) stopTaking() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.closed = true
	if !f.running {
		f.running = true
		for user, q := range f.users {
			f.startLocked(user, q)
		}
	}
}

// next takes user's oldest waiting notice off q; false when none is left,
// and then the user is forgotten (a later notice starts a new worker).
func (f *Fanout) next(user string, q *noticeQueue) (event.Notice, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(q.pending) == 0 {
		q.working = false
		delete(f.users, user)
		return event.Notice{}, false
	}
	n := q.pending[0]
	q.pending[0] = event.Notice{}
	q.pending = q.pending[1:]
	return n, true
}

// deliver sends n to every node at once and waits for them all.
func (f *Fanout) deliver(n event.Notice) {
	var wg sync.WaitGroup
	for _, node := range f.nodes() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(f.ctx, sendTimeout)
			defer cancel()
			if err := f.send(ctx, node, n); err != nil {
				f.log.Warn("notices: tell a node", "node", node, "user", n.User, "err", err)
			}
		}()
	}
	wg.Wait()
}
