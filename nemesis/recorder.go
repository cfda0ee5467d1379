package nemesis

import (
	"sync"
	"time"
)

// recorder collects a run's history as it happens. Times are read from one
// monotonic clock started with the run.
type recorder struct {
	start time.Time

	mu  sync.Mutex
	h   History
	seq map[string]int
	// ended is when each node's lease (node/id) was ended, as its store
	// wrote it.
	ended map[string]int64
}

func newRecorder() *recorder {
	return &recorder{start: time.Now(), seq: map[string]int{}, ended: map[string]int64{}}
}

// now is the time since the run started.
func (r *recorder) now() int64 { return int64(time.Since(r.start)) }

func (r *recorder) op(o Op) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Ops = append(r.h.Ops, o)
}

func (r *recorder) write(w Write) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seq[w.Node]++
	w.Seq = r.seq[w.Node]
	if w.Kind == WriteEnd {
		r.ended[w.Node+"/"+w.Ledger.LeaseID] = w.Done
	}
	r.h.Writes = append(r.h.Writes, w)
}

func (r *recorder) fault(f Fault) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Faults = append(r.h.Faults, f)
}

func (r *recorder) heal(h Heal) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Heals = append(r.h.Heals, h)
}

func (r *recorder) svcOp(o SvcOp) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.SvcOps = append(r.h.SvcOps, o)
}

func (r *recorder) seen(s Seen) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.Seen = append(r.h.Seen, s)
}

func (r *recorder) falseDead(m Membership) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.h.FalseDead = append(r.h.FalseDead, m)
}

// opsDone counts the operations recorded so far.
func (r *recorder) opsDone() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.h.Ops)
}

// history is the run's history so far (a copy of the slices' headers: the
// recorder only appends).
func (r *recorder) history() *History {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := r.h
	h.End = r.now()
	return &h
}

// endedBefore reports whether node's store had ended lease id before t.
func (r *recorder) endedBefore(node, id string, t int64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	at, ok := r.ended[node+"/"+id]
	return ok && at < t
}
