// Package replay is `dibs replay`: a discrete-event what-if that plays a
// trace of GPU requests under several ways of sharing the GPUs — dibs as
// it is, Slack (no queue: people retry and forget), and a SLURM-like batch
// queue — and reports what each costs the team. It uses dibs's own rules
// (queue.Schedule, lease.ChooseNode, lease.Place, queue.DecayedUsage), not
// a copy of them, so a change to the rules changes the replay. It is pure:
// the simulated time is the only clock, and the same trace and seed give
// the same figures.
package replay

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	simprobe "github.com/dibs-gpu/dibs/nodeprobe/sim"
	"github.com/dibs-gpu/dibs/queue"
)

// How a request enters dibs.
const (
	// ViaClaim: a direct claim (`dibs claim`, `dibs run`), which starts at
	// once when its GPUs are free and queues when they are not.
	ViaClaim = "claim"
	// ViaQueue: a queued request (`dibs run --queue`, gangs always).
	ViaQueue = "queue"
)

// Request is one piece of work a person asks GPUs for.
type Request struct {
	ID   string    `json:"id"`
	At   time.Time `json:"at"`
	User string    `json:"user"`
	// Nodes × GPUs; Nodes 1 (or 0) is a single-node request.
	Nodes int `json:"nodes,omitempty"`
	GPUs  int `json:"gpus"`
	// Kind is interactive (a person at a shell: they release by hand) or
	// batch (a command: its GPUs come back when it exits).
	Kind lease.Kind `json:"kind,omitempty"`
	// Limit is the time limit asked for (dibs --for, sbatch --time);
	// zero is the kind's default.
	Limit time.Duration `json:"limit,omitempty"`
	// Work is how long the GPUs compute once it starts.
	Work time.Duration `json:"work"`
	// Hold is how long the person keeps an interactive lease from its
	// start if nobody makes them give it back (at least Work): the idle
	// tail of a session, a lunch, a night. Batch work ends with its
	// command, so its Hold is Work.
	Hold time.Duration `json:"hold,omitempty"`
	// Via is how it enters dibs: ViaClaim (default for single-node
	// requests) or ViaQueue (default for gangs, which must queue).
	Via string `json:"via,omitempty"`
	// From is the node it is asked at (default: the first node); a
	// single-node request prefers it on ties.
	From string `json:"from,omitempty"`
	// Model restricts it to GPUs of a model (substring).
	Model string `json:"model,omitempty"`
	// Array makes it a job array (`dibs run --array`, sbatch --array):
	// "0-19%4" runs it once per index, as queued tasks ID/INDEX, at most 4
	// waiting or running at once.
	Array string `json:"array,omitempty"`
}

// NodeSpec is one node of the replayed cluster: a simulator spec
// ("8xH100-80GB": the GPUs and topology `dibs agent --sim` would show) or,
// for a cluster's own history, the snapshot its agent last published, so
// placement is the live one.
type NodeSpec struct {
	Name     string              `json:"name"`
	Spec     string              `json:"spec,omitempty"`
	Snapshot *nodeprobe.Snapshot `json:"snapshot,omitempty"`
}

// snapshot is the node's GPUs, with nothing running on them.
func (n NodeSpec) snapshot(at time.Time) (nodeprobe.Snapshot, error) {
	if n.Snapshot != nil {
		if n.Spec != "" {
			return nodeprobe.Snapshot{}, fmt.Errorf("trace node %s has both a spec and a snapshot: give one", n.Name)
		}
		s := *n.Snapshot
		s.GPUs = slices.Clone(s.GPUs)
		for i := range s.GPUs {
			s.GPUs[i].Processes = nil
			s.GPUs[i].Error = ""
		}
		if len(s.GPUs) == 0 || len(s.GPUs) > words.MaxGPUsPerNode {
			return nodeprobe.Snapshot{}, fmt.Errorf("trace node %s has %d GPUs", n.Name, len(s.GPUs))
		}
		return s, nil
	}
	sim, err := simprobe.New(simprobe.Options{Spec: n.Spec, HostName: n.Name, Now: func() time.Time { return at }})
	if err != nil {
		return nodeprobe.Snapshot{}, fmt.Errorf("trace node %s: %w", n.Name, err)
	}
	return sim.Snapshot(context.Background())
}

// Trace is a cluster and the requests made of it over a window.
type Trace struct {
	Name  string     `json:"name,omitempty"`
	Nodes []NodeSpec `json:"nodes"`
	// Start and End bound the window the figures cover; zero takes the
	// first request's time and the last request's time plus a day.
	Start    time.Time `json:"start,omitzero"`
	End      time.Time `json:"end,omitzero"`
	Requests []Request `json:"-"`
}

// header is the first line of a trace file.
type header struct {
	Trace *Trace `json:"trace"`
}

// wireRequest is a request line: durations as people write them.
type wireRequest struct {
	ID    string     `json:"id"`
	At    time.Time  `json:"at"`
	User  string     `json:"user"`
	Nodes int        `json:"nodes,omitempty"`
	GPUs  int        `json:"gpus"`
	Kind  lease.Kind `json:"kind,omitempty"`
	Limit string     `json:"limit,omitempty"`
	Work  string     `json:"work"`
	Hold  string     `json:"hold,omitempty"`
	Via   string     `json:"via,omitempty"`
	From  string     `json:"from,omitempty"`
	Model string     `json:"model,omitempty"`
	Array string     `json:"array,omitempty"`
}

// Bounds on a trace read from a file.
const (
	MaxRequests = 200000
	MaxNodes    = 256
	maxLine     = 64 << 10
)

// Read parses a trace: JSON lines, the first {"trace":{...}} naming the
// nodes (and optionally the window), then one request per line. Blank
// lines and lines starting with # are skipped. Every problem names its
// line.
func Read(r io.Reader) (Trace, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 4096), maxLine)
	var t Trace
	seenHeader := false
	ids := map[string]int{}
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		dec := json.NewDecoder(strings.NewReader(line))
		dec.DisallowUnknownFields()
		if !seenHeader {
			var h header
			if err := dec.Decode(&h); err != nil || h.Trace == nil {
				return Trace{}, fmt.Errorf("trace line %d: the first line must be {\"trace\":{\"nodes\":[{\"name\":...,\"spec\":\"8xH100\"}]}} (%v)", n, errOr(err, "no trace"))
			}
			t = *h.Trace
			seenHeader = true
			continue
		}
		var w wireRequest
		if err := dec.Decode(&w); err != nil {
			return Trace{}, fmt.Errorf("trace line %d: %v", n, err)
		}
		req, err := w.request()
		if err != nil {
			return Trace{}, fmt.Errorf("trace line %d: %v", n, err)
		}
		if prev, dup := ids[req.ID]; dup {
			return Trace{}, fmt.Errorf("trace line %d: request id %q was already used on line %d", n, req.ID, prev)
		}
		ids[req.ID] = n
		if len(t.Requests) >= MaxRequests {
			return Trace{}, fmt.Errorf("trace line %d: more than %d requests", n, MaxRequests)
		}
		t.Requests = append(t.Requests, req)
	}
	if err := sc.Err(); err != nil {
		return Trace{}, fmt.Errorf("read trace: %w", err)
	}
	if !seenHeader {
		return Trace{}, fmt.Errorf("empty trace: the first line must name the nodes")
	}
	if err := t.Check(); err != nil {
		return Trace{}, err
	}
	return t, nil
}

func errOr(err error, s string) string {
	if err != nil {
		return err.Error()
	}
	return s
}

func (w wireRequest) request() (Request, error) {
	r := Request{ID: w.ID, At: w.At, User: w.User, Nodes: w.Nodes, GPUs: w.GPUs, Kind: w.Kind, Via: w.Via, From: w.From, Model: w.Model, Array: w.Array}
	for _, d := range []struct {
		name string
		s    string
		dst  *time.Duration
		need bool
	}{{"work", w.Work, &r.Work, true}, {"limit", w.Limit, &r.Limit, false}, {"hold", w.Hold, &r.Hold, false}} {
		if d.s == "" {
			if d.need {
				return r, fmt.Errorf("request %q has no %s: write it like \"90m\"", w.ID, d.name)
			}
			continue
		}
		v, err := words.ParseDuration(d.s)
		if err != nil {
			return r, fmt.Errorf("request %q %s: %v", w.ID, d.name, err)
		}
		*d.dst = v
	}
	return r, nil
}

// Write writes t in the format Read reads.
func Write(w io.Writer, t Trace) error {
	enc := json.NewEncoder(w)
	h := t
	h.Requests = nil
	if err := enc.Encode(header{Trace: &h}); err != nil {
		return err
	}
	for _, r := range t.Requests {
		wr := wireRequest{ID: r.ID, At: r.At, User: r.User, Nodes: r.Nodes, GPUs: r.GPUs, Kind: r.Kind, Via: r.Via, From: r.From, Model: r.Model, Array: r.Array,
			Work: exactDuration(r.Work)}
		if r.Limit > 0 {
			wr.Limit = exactDuration(r.Limit)
		}
		if r.Hold > 0 && r.Hold != r.Work {
			wr.Hold = exactDuration(r.Hold)
		}
		if err := enc.Encode(wr); err != nil {
			return err
		}
	}
	return nil
}

// exactDuration writes d so that it reads back the same: Go's form
// without its trailing zero units (25h37m, 90m, 1h0m5s).
func exactDuration(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = strings.TrimSuffix(s, "0s")
	}
	if strings.HasSuffix(s, "h0m") {
		s = strings.TrimSuffix(s, "0m")
	}
	return s
}

// Check refuses a trace the replay cannot play, naming the request.
func (t *Trace) Check() error {
	if len(t.Nodes) == 0 {
		return fmt.Errorf("the trace names no nodes")
	}
	if len(t.Nodes) > MaxNodes {
		return fmt.Errorf("the trace names %d nodes, over %d", len(t.Nodes), MaxNodes)
	}
	names := map[string]bool{}
	for _, n := range t.Nodes {
		if err := words.ValidNodeName(n.Name); err != nil {
			return fmt.Errorf("trace node: %w", err)
		}
		if names[n.Name] {
			return fmt.Errorf("trace node %s is named twice", n.Name)
		}
		names[n.Name] = true
		if _, err := n.snapshot(time.Time{}); err != nil {
			return err
		}
	}
	for i := range t.Requests {
		r := &t.Requests[i]
		if r.ID == "" || len(r.ID) > words.MaxNameLen || strings.ContainsFunc(r.ID, func(c rune) bool { return c <= ' ' || c == 0x7f }) {
			return fmt.Errorf("request %d has a bad id %q: one word of at most %d characters", i+1, r.ID, words.MaxNameLen)
		}
		switch {
		case !words.ValidUserName(r.User):
			return fmt.Errorf("request %s has a bad user %q", r.ID, r.User)
		case r.At.IsZero() || !words.ValidSince(r.At):
			return fmt.Errorf("request %s has no time (\"at\")", r.ID)
		case r.GPUs < 1 || r.GPUs > words.MaxGPUsPerNode:
			return fmt.Errorf("request %s asks for %d GPUs", r.ID, r.GPUs)
		case r.Nodes < 0 || r.Nodes > words.MaxGangNodes:
			return fmt.Errorf("request %s asks for %d nodes", r.ID, r.Nodes)
		case r.Work <= 0 || r.Work > words.MaxDuration:
			return fmt.Errorf("request %s has work %s: it must be positive", r.ID, r.Work)
		case r.Hold != 0 && r.Hold < r.Work:
			return fmt.Errorf("request %s holds its GPUs (%s) for less than its work (%s)", r.ID, words.FormatDuration(r.Hold), words.FormatDuration(r.Work))
		case r.Hold > words.MaxDuration || r.Limit < 0 || r.Limit > words.MaxDuration:
			return fmt.Errorf("request %s has a time out of range", r.ID)
		case r.Via != "" && r.Via != ViaClaim && r.Via != ViaQueue:
			return fmt.Errorf("request %s: via %q is not %s or %s", r.ID, r.Via, ViaClaim, ViaQueue)
		case r.From != "" && !names[r.From]:
			return fmt.Errorf("request %s is asked at %s, which is not a node of the trace", r.ID, r.From)
		}
		if r.Array != "" {
			if _, err := queue.ParseArray(r.Array); err != nil {
				return fmt.Errorf("request %s: %v", r.ID, err)
			}
			if r.Via == ViaClaim {
				return fmt.Errorf("request %s: an array is queued (via %q), not claimed", r.ID, ViaQueue)
			}
		}
		if r.Kind != "" {
			if _, err := lease.ParseKind(string(r.Kind)); err != nil {
				return fmt.Errorf("request %s: %v", r.ID, err)
			}
		}
		if r.Nodes > 1 && r.Via == ViaClaim {
			return fmt.Errorf("request %s is a %d-node gang: gangs queue (via %q)", r.ID, r.Nodes, ViaQueue)
		}
	}
	if !t.Start.IsZero() && !t.End.IsZero() && !t.End.After(t.Start) {
		return fmt.Errorf("the trace ends (%s) before it starts (%s)", t.End.Format(time.RFC3339), t.Start.Format(time.RFC3339))
	}
	return nil
}

// normalized fills a request's defaults.
func (r Request) normalized(p lease.Policy, first string) Request {
	if r.Nodes < 1 {
		r.Nodes = 1
	}
	if r.Kind == "" {
		r.Kind = lease.KindInteractive
	}
	if r.Limit <= 0 {
		r.Limit, _ = p.Limits(r.Kind)
	}
	if _, max := p.Limits(r.Kind); r.Limit > max {
		r.Limit = max
	}
	if r.Hold < r.Work || r.Kind == lease.KindBatch {
		r.Hold = r.Work
	}
	if r.Via == "" {
		r.Via = ViaClaim
		if r.Nodes > 1 {
			r.Via = ViaQueue
		}
	}
	if r.From == "" {
		r.From = first
	}
	return r
}

// window is the span the figures cover.
func (t *Trace) window() (time.Time, time.Time) {
	start, end := t.Start, t.End
	if len(t.Requests) > 0 {
		first := slices.MinFunc(t.Requests, func(a, b Request) int { return a.At.Compare(b.At) }).At
		last := slices.MaxFunc(t.Requests, func(a, b Request) int { return a.At.Compare(b.At) }).At
		if start.IsZero() {
			start = first
		}
		if end.IsZero() {
			end = last.Add(24 * time.Hour)
		}
	}
	if !end.After(start) {
		end = start.Add(time.Hour)
	}
	return start, end
}

// sortedRequests returns the requests by time, then id.
func (t *Trace) sortedRequests() []Request {
	rs := slices.Clone(t.Requests)
	slices.SortStableFunc(rs, func(a, b Request) int {
		if c := a.At.Compare(b.At); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
	return rs
}
