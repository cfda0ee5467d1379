package events

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// Fanout carries each notice from the node where its event happened to
// every live node, whose agent shows it in the person's tmux sessions and
// on their boards there, and posts it to their webhook if that node keeps
// it. It runs on its own goroutine: an event's recorder never waits for the
// network.
type Fanout struct {
	nodes func() []string
	send  func(ctx context.Context, node string, n lease.Notice) error
	log   *slog.Logger

	q    chan lease.Notice
	once sync.Once
	stop chan struct{}
	done chan struct{}
}

// sendTimeout bounds one node's delivery of one notice.
const sendTimeout = 3 * time.Second

// NewFanout sends each notice to nodes() with send; Run starts it.
func NewFanout(nodes func() []string, send func(ctx context.Context, node string, n lease.Notice) error, log *slog.Logger) *Fanout {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Fanout{nodes: nodes, send: send, log: log, q: make(chan lease.Notice, 1024), stop: make(chan struct{}), done: make(chan struct{})}
}

// Notice queues n for every node; a full queue drops it, with a warning.
func (f *Fanout) Notice(n lease.Notice) {
	select {
	case f.q <- n:
	default:
		f.log.Warn("notices: the queue is full; dropping one", "user", n.User, "kind", n.Kind)
	}
}

// Run starts the sender.
func (f *Fanout) Run() { go f.loop() }

// Close stops the sender after the notices queued so far.
func (f *Fanout) Close() {
	f.once.Do(func() { close(f.stop) })
	<-f.done
}

func (f *Fanout) loop() {
	defer close(f.done)
	for {
		select {
		case n := <-f.q:
			f.deliver(n)
		case <-f.stop:
			for {
				select {
				case n := <-f.q:
					f.deliver(n)
				default:
					return
				}
			}
		}
	}
}

// deliver sends n to every node at once and waits for them all.
func (f *Fanout) deliver(n lease.Notice) {
	var wg sync.WaitGroup
	for _, node := range f.nodes() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx, cancel := context.WithTimeout(context.Background(), sendTimeout)
			defer cancel()
			if err := f.send(ctx, node, n); err != nil {
				f.log.Warn("notices: tell a node", "node", node, "user", n.User, "err", err)
			}
		}()
	}
	wg.Wait()
}
