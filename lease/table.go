package lease

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dibs-gpu/dibs/lease/termsafe"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// MaxNoteLen bounds a lease note so it fits the board and the gossip wire.
const MaxNoteLen = 200

// Claim is what a person asks for on one node.
type Claim struct {
	// Count GPUs chosen by dibs, or exactly GPUs; one of the two.
	Count int
	GPUs  []int
	// Duration is the time limit; zero means the kind's default.
	Duration time.Duration
	Note     string
	Kind     Kind
	// Force allows naming GPUs that have someone's process on them but no lease.
	Force bool
}

// Table is one node's lease table: the leases this agent alone grants, renews
// and ends (single writer per GPU), and the fencing-token counter. Plan methods
// never mutate; the agent persists what they return and then calls Put or
// Remove, so memory never runs ahead of disk. A Table is not safe for
// concurrent use; the agent serialises access.
type Table struct {
	node      string
	leases    map[string]*entry
	lastToken uint64
}

type entry struct {
	Lease
	// mono holds the lease's limits on the monotonic clock, so a
	// wall-clock jump forward cannot end it (or its graces) early.
	mono MonoLimits
}

// NewTable rebuilds a node's table from what the store loaded. A lease
// written under the same boot keeps its monotonic limits; the others' are
// measured from now's wall clock.
func NewTable(node string, leases []Lease, lastToken uint64, now Instant) *Table {
	t := &Table{node: node, leases: make(map[string]*entry, len(leases)), lastToken: lastToken}
	for _, l := range leases {
		t.put(l, now)
	}
	return t
}

// Node is the name of the node this table belongs to.
func (t *Table) Node() string { return t.node }

// LastToken is the highest fencing token ever granted on this node.
func (t *Table) LastToken() uint64 { return t.lastToken }

// Get returns the lease with id.
func (t *Table) Get(id string) (Lease, bool) {
	e, ok := t.leases[id]
	if !ok {
		return Lease{}, false
	}
	l := e.Lease
	l.Mono = nil
	return l, true
}

// List returns every lease, ordered by token (grant order).
func (t *Table) List() []Lease {
	out := make([]Lease, 0, len(t.leases))
	for _, e := range t.leases {
		l := e.Lease
		l.Mono = nil
		out = append(out, l)
	}
	slices.SortFunc(out, func(a, b Lease) int { return cmp.Compare(a.Token, b.Token) })
	return out
}

// Len is the number of live leases.
func (t *Table) Len() int { return len(t.leases) }

// Stamp returns l with its monotonic limits as the table will keep them
// once l is Put at now, for the store to persist with it.
func (t *Table) Stamp(l Lease, now Instant) Lease {
	m := t.limits(&l, now)
	l.Mono = &m
	return l
}

func (t *Table) limits(l *Lease, now Instant) MonoLimits {
	if old, ok := t.leases[l.ID]; ok {
		return moved(old.mono, &old.Lease, l, now)
	}
	if l.Mono != nil && l.Mono.Boot != "" && l.Mono.Boot == now.Boot {
		return *l.Mono
	}
	return limitsAt(l, now)
}

// Put records a lease the store has made durable.
func (t *Table) Put(l Lease, now Instant) { t.put(l, now) }

func (t *Table) put(l Lease, now Instant) {
	m := t.limits(&l, now)
	l.Mono = &m
	if old, ok := t.leases[l.ID]; ok {
		old.Lease, old.mono = l, m
		return
	}
	t.leases[l.ID] = &entry{Lease: l, mono: m}
	if l.Token > t.lastToken {
		t.lastToken = l.Token
	}
}

// Remove forgets a lease the store has deleted.
func (t *Table) Remove(id string) { delete(t.leases, id) }

// Current reports whether token is the live token of lease id. The agent
// checks it before starting or signalling a session, so a stale actor (an old
// request, a restarted watcher) cannot touch a lease that has moved on.
func (t *Table) Current(id string, token uint64) bool {
	e, ok := t.leases[id]
	return ok && e.Token == token
}

// holders maps GPU index to the lease holding it.
func (t *Table) holders() map[int]*Lease {
	m := make(map[int]*Lease)
	for _, e := range t.leases {
		for _, g := range e.GPUs {
			m[g] = &e.Lease
		}
	}
	return m
}

// PlanClaim decides a claim without changing the table: the lease to persist,
// or a refusal that says why and what to do.
func (t *Table) PlanClaim(c Caller, req Claim, snap nodeprobe.Snapshot, now time.Time, p Policy) (Lease, error) {
	if req.Kind == "" {
		req.Kind = KindInteractive
	}
	if _, err := ParseKind(string(req.Kind)); err != nil {
		return Lease{}, err
	}
	dur, err := checkDuration(req.Duration, req.Kind, p)
	if err != nil {
		return Lease{}, err
	}
	if err := checkNote(req.Note); err != nil {
		return Lease{}, err
	}
	if len(snap.GPUs) == 0 {
		return Lease{}, errorf(CodeUnavailable, "node %s has no GPUs the probe can see", t.node)
	}
	holders := t.holders()
	var gpus []int
	switch {
	case len(req.GPUs) > 0 && req.Count > 0 && req.Count != len(req.GPUs):
		return Lease{}, Invalidf("asked for %d GPUs but named %d: give either -g N or --gpus", req.Count, len(req.GPUs))
	case len(req.GPUs) > 0:
		gpus, err = checkNamed(req, snap, holders, now, t.node)
		if err != nil {
			return Lease{}, err
		}
	case req.Count > 0:
		gpus, err = pickFree(req.Count, snap, holders, now, t.node)
		if err != nil {
			return Lease{}, err
		}
	default:
		return Lease{}, Invalidf("say how many GPUs (-g N) or which (--gpus 0,2)")
	}
	token := t.lastToken + 1
	return Lease{
		ID:        LeaseID(t.node, token),
		Node:      t.node,
		GPUs:      gpus,
		User:      c.User,
		UID:       c.UID,
		Token:     token,
		Kind:      req.Kind,
		Note:      req.Note,
		StartedAt: now.Round(0),
		ExpiresAt: now.Round(0).Add(dur),
	}, nil
}

// CheckNote refuses a note that is not one short line of plain text.
func CheckNote(note string) error { return checkNote(note) }

// checkNote keeps notes to one short line of plain text: everyone's board
// and `dibs ls` print them, so an escape sequence, a bidi override or a
// zero-width character in a note would reach (or mislead) other people's
// terminals. A note is refused rather than escaped: the person typing it is
// there to fix it.
func checkNote(note string) error {
	if len(note) > MaxNoteLen {
		return Invalidf("note is %d bytes; keep it to %d at most", len(note), MaxNoteLen)
	}
	if strings.ContainsAny(note, "\n\r") {
		return Invalidf("note must be one line")
	}
	return CheckText("note", note)
}

// CheckText refuses text a person typed (a note, a session name, a model)
// that holds anything termsafe would escape: control characters and escape
// sequences, bidi controls, zero-width and other invisible characters, bytes
// that are not UTF-8. The message names the character, where it is, and
// says to remove it. what names the field ("note").
func CheckText(what, s string) error {
	if err := termsafe.Check(s); err != nil {
		return Invalidf("%s holds %v: remove it; a %s must be plain text", what, err, what)
	}
	return nil
}

// clipNote cuts a note made by dibs to MaxNoteLen bytes on a rune boundary.
func clipNote(s string) string {
	if len(s) <= MaxNoteLen {
		return s
	}
	cut := MaxNoteLen - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}

func checkDuration(d time.Duration, k Kind, p Policy) (time.Duration, error) {
	def, max := p.Limits(k)
	if d == 0 {
		return def, nil
	}
	if d < 0 {
		return 0, Invalidf("duration must be positive, got %s", FormatDuration(d))
	}
	if d > max {
		return 0, Invalidf("%s is over the %s maximum of %s on this node: ask for less (--for %s)", FormatDuration(d), k, FormatDuration(max), FormatDuration(max))
	}
	return d, nil
}

func checkNamed(req Claim, snap nodeprobe.Snapshot, holders map[int]*Lease, now time.Time, node string) ([]int, error) {
	seen := make(map[int]bool)
	gpus := make([]int, 0, len(req.GPUs))
	for _, g := range req.GPUs {
		if seen[g] {
			return nil, Invalidf("GPU %d named twice", g)
		}
		seen[g] = true
		gpu := findGPU(snap, g)
		if gpu == nil {
			return nil, Invalidf("no GPU %d on %s: it has GPUs %s", g, node, indexRange(snap))
		}
		// Down whoever holds it: the probe cannot read it, so neither can a job.
		if gpu.Error != "" {
			return nil, errorf(CodeUnavailable, "GPU %d on %s is down (%s): pick another GPU", g, node, termsafe.String(gpu.Error))
		}
		if l := holders[g]; l != nil {
			return nil, errorf(CodeConflict, "GPU %d is held by %s %s (lease %s, until %s): pick another GPU, or ask %s", g, l.User, timeLeft(l.ExpiresAt, now), l.ID, l.ExpiresAt.Local().Format("Mon 15:04"), l.User)
		}
		if len(gpu.Processes) > 0 && !req.Force {
			pr := gpu.Processes[0]
			return nil, errorf(CodeConflict, "GPU %d has no lease but %s's process %s (pid %d) is running on it: pick another GPU, or add --force if you know it is safe", g, ownerName(pr), termsafe.String(pr.Command), pr.PID)
		}
		gpus = append(gpus, g)
	}
	slices.Sort(gpus)
	return gpus, nil
}

func findGPU(snap nodeprobe.Snapshot, index int) *nodeprobe.GPU {
	for i := range snap.GPUs {
		if snap.GPUs[i].Index == index {
			return &snap.GPUs[i]
		}
	}
	return nil
}

// indexRange lists a node's GPU indices: 0-7 when they run without a gap,
// 0,1,3 otherwise.
func indexRange(snap nodeprobe.Snapshot) string {
	if len(snap.GPUs) == 0 {
		return "none"
	}
	idx := make([]int, len(snap.GPUs))
	for i, g := range snap.GPUs {
		idx[i] = g.Index
	}
	slices.Sort(idx)
	if idx[len(idx)-1]-idx[0] == len(idx)-1 && len(idx) > 1 {
		return fmt.Sprintf("%d-%d", idx[0], idx[len(idx)-1])
	}
	return strings.TrimPrefix(strings.TrimPrefix(gpuList(idx), "GPUs "), "GPU ")
}

// ownerName names a process's owner for a message. The name comes from the
// node's account database through /proc, so it is made terminal-safe.
func ownerName(pr nodeprobe.Process) string {
	switch {
	case pr.User != "":
		return termsafe.String(pr.User)
	case pr.UID >= 0:
		return "uid " + strconv.Itoa(pr.UID)
	}
	return "an unknown user"
}

// usable reports whether -g N may pick g: no lease, no process, and the probe
// could read it (a GPU with an error is down, never free).
func usable(g *nodeprobe.GPU, held bool) bool {
	return !held && len(g.Processes) == 0 && g.Error == ""
}

// FreeGPUs lists the GPUs with no lease, no process and no error, the only
// ones -g N picks from.
func FreeGPUs(snap nodeprobe.Snapshot, leases []Lease) []int {
	held := make(map[int]bool)
	for _, l := range leases {
		for _, g := range l.GPUs {
			held[g] = true
		}
	}
	var free []int
	for i := range snap.GPUs {
		if g := &snap.GPUs[i]; usable(g, held[g.Index]) {
			free = append(free, g.Index)
		}
	}
	return free
}

func pickFree(n int, snap nodeprobe.Snapshot, holders map[int]*Lease, now time.Time, node string) ([]int, error) {
	var free []int
	for i := range snap.GPUs {
		if g := &snap.GPUs[i]; usable(g, holders[g.Index] != nil) {
			free = append(free, g.Index)
		}
	}
	if n > len(snap.GPUs) {
		return nil, Invalidf("%s has only %d GPUs; asked for %d: ask for at most %d, or for several nodes", node, len(snap.GPUs), n, len(snap.GPUs))
	}
	if len(free) < n {
		out := "wait for them, or ask the holders"
		if len(free) > 0 {
			out = fmt.Sprintf("ask for %d or fewer, wait, or ask the holders", len(free))
		}
		return nil, errorf(CodeConflict, "asked for %d GPUs but only %d free on %s: %s; %s", n, len(free), node, describeBusy(snap, holders, now), out)
	}
	return Place(snap, free, n), nil
}

// describeBusy says who holds the GPUs that are not free, and until when, so
// a refusal tells the person whom to ask.
func describeBusy(snap nodeprobe.Snapshot, holders map[int]*Lease, now time.Time) string {
	type hold struct {
		who   string
		gpus  []int
		until time.Time
	}
	var order []string
	m := make(map[string]*hold)
	add := func(key, who string, g int, until time.Time) {
		h, ok := m[key]
		if !ok {
			h = &hold{who: who, until: until}
			m[key] = h
			order = append(order, key)
		}
		h.gpus = append(h.gpus, g)
	}
	for _, g := range snap.GPUs {
		if l := holders[g.Index]; l != nil {
			add("lease "+l.ID, l.User, g.Index, l.ExpiresAt)
		} else if len(g.Processes) > 0 {
			who := ownerName(g.Processes[0])
			add("proc "+who, who, g.Index, time.Time{})
		} else if g.Error != "" {
			add("down", "", g.Index, time.Time{})
		}
	}
	parts := make([]string, 0, len(order))
	for _, k := range order {
		h := m[k]
		var s string
		switch {
		case k == "down":
			s = gpuList(h.gpus) + " down"
		case h.until.IsZero():
			s = fmt.Sprintf("%s runs unleased processes on %s", h.who, gpuList(h.gpus))
		default:
			s = fmt.Sprintf("%s holds %s %s", h.who, gpuList(h.gpus), timeLeft(h.until, now))
		}
		parts = append(parts, s)
	}
	return strings.Join(parts, "; ")
}

// timeLeft says how long a lease still runs, or how long it is overdue (end
// action warn keeps it held past its end).
func timeLeft(end, now time.Time) string {
	if left := end.Sub(now); left > 0 {
		return "for " + FormatDuration(left) + " more"
	}
	return FormatDuration(now.Sub(end)) + " past its end"
}

func gpuList(g []int) string {
	if len(g) == 1 {
		return "GPU " + strconv.Itoa(g[0])
	}
	s := make([]string, len(g))
	for i, x := range g {
		s[i] = strconv.Itoa(x)
	}
	return "GPUs " + strings.Join(s, ",")
}

// PlanRelease checks that c may end lease id.
func (t *Table) PlanRelease(c Caller, id string) (Lease, error) {
	e, ok := t.leases[id]
	if !ok {
		return Lease{}, errorf(CodeNotFound, "no lease %s on %s: `dibs ls` shows the live ones", id, t.node)
	}
	if e.UID != c.UID && !c.Admin {
		return Lease{}, errorf(CodeForbidden, "lease %s belongs to %s; only they (or an admin) can end it", id, e.User)
	}
	return e.Lease, nil
}

// PlanExtend moves a lease's end by d, refusing to go past the kind's maximum
// measured from now.
func (t *Table) PlanExtend(c Caller, id string, d time.Duration, at Instant, p Policy) (Lease, error) {
	now := at.Wall
	e, ok := t.leases[id]
	if !ok {
		return Lease{}, errorf(CodeNotFound, "no lease %s on %s: `dibs ls` shows the live ones", id, t.node)
	}
	if e.UID != c.UID {
		return Lease{}, errorf(CodeForbidden, "lease %s belongs to %s; only they can extend it", id, e.User)
	}
	if d <= 0 {
		return Lease{}, Invalidf("extend by a positive duration, like --for 2h")
	}
	_, max := p.Limits(e.Kind)
	// An overdue lease is extended from now; one still running from its end.
	// Overdue is judged as Due judges it, so a wall clock that jumped forward
	// does not make a running lease look overdue and lose its time left.
	base := e.ExpiresAt
	if e.ended(at) {
		base = now.Round(0)
	}
	end := base.Add(d)
	if end.Sub(now) > max {
		room := max - base.Sub(now)
		if room < time.Minute {
			return Lease{}, Invalidf("lease %s already ends %s from now, the %s maximum", id, FormatDuration(e.ExpiresAt.Sub(now)), e.Kind)
		}
		return Lease{}, Invalidf("extending %s by %s would end it %s from now, over the %s maximum of %s: extend by at most %s", id, FormatDuration(d), FormatDuration(end.Sub(now)), e.Kind, FormatDuration(max), FormatDuration(room.Truncate(time.Minute)))
	}
	l := e.Lease
	l.GPUs = slices.Clone(l.GPUs)
	l.ExpiresAt = end
	l.Warned = false
	l.FinalWarned = false
	l.OverdueNoticed = false
	l.SignalledAt = time.Time{}
	return l, nil
}

// PlanAdopt takes a run started without a lease into one, on the GPUs its
// process uses, if the caller owns the process and nobody else holds them.
func (t *Table) PlanAdopt(c Caller, pid int, d time.Duration, note string, snap nodeprobe.Snapshot, now time.Time, p Policy) (Lease, error) {
	var gpus []int
	var owner *nodeprobe.Process
	for _, g := range snap.GPUs {
		for i := range g.Processes {
			// A pid on several MIG slices of one GPU is listed once per slice.
			if g.Processes[i].PID == pid {
				if !slices.Contains(gpus, g.Index) {
					gpus = append(gpus, g.Index)
				}
				owner = &g.Processes[i]
			}
		}
	}
	if owner == nil {
		return Lease{}, errorf(CodeNotFound, "pid %d is not on any GPU of %s: `dibs ls` lists the processes it sees", pid, t.node)
	}
	if owner.UID != c.UID && !c.Admin {
		return Lease{}, errorf(CodeForbidden, "pid %d belongs to %s, not you: only its owner can adopt it", pid, ownerName(*owner))
	}
	holders := t.holders()
	for _, g := range gpus {
		if l := holders[g]; l != nil {
			if l.UID == owner.UID {
				return Lease{}, errorf(CodeConflict, "GPU %d is already in your lease %s", g, l.ID)
			}
			return Lease{}, errorf(CodeConflict, "GPU %d is held by %s (lease %s): pid %d runs on someone else's GPU", g, l.User, l.ID, pid)
		}
	}
	dur, err := checkDuration(d, KindInteractive, p)
	if err != nil {
		return Lease{}, err
	}
	if note == "" {
		// The command is whatever the process calls itself: escape it, and
		// keep the note within what a typed one may be.
		note = clipNote(fmt.Sprintf("adopted pid %d (%s)", pid, termsafe.String(owner.Command)))
	} else if err := checkNote(note); err != nil {
		return Lease{}, err
	}
	token := t.lastToken + 1
	return Lease{
		ID: LeaseID(t.node, token), Node: t.node, GPUs: gpus,
		User: owner.User, UID: owner.UID, Token: token, Kind: KindInteractive,
		Note: note, StartedAt: now.Round(0), ExpiresAt: now.Round(0).Add(dur),
	}, nil
}

// ByRequest finds the lease a caller's earlier claim with the same request
// id made, so a retried claim whose answer was lost gets that lease back
// instead of more GPUs.
func (t *Table) ByRequest(uid int, requestID string) (Lease, bool) {
	if requestID == "" {
		return Lease{}, false
	}
	for _, e := range t.leases {
		if e.UID == uid && e.RequestID == requestID {
			l := e.Lease
			l.Mono = nil
			return l, true
		}
	}
	return Lease{}, false
}

// ByEntry finds the lease (or reservation) started for a queued attempt, so
// a retried start gets what the first one got.
func (t *Table) ByEntry(key string) (Lease, bool) {
	for _, e := range t.leases {
		if e.Entry == key {
			l := e.Lease
			l.Mono = nil
			return l, true
		}
	}
	return Lease{}, false
}

// RanBefore reports how an attempt that already ran here ended: an attempt
// never runs twice on one node, whatever a late or repeated start says.
func RanBefore(ended []EndedRun, key string) (EndedRun, bool) {
	for _, x := range ended {
		if x.Entry == key && !x.Reserved {
			return x, true
		}
	}
	return EndedRun{}, false
}

// ValidRequestID accepts the ids clients put on claims: 8 to 64 letters,
// digits, '-' and '_'.
func ValidRequestID(s string) bool {
	if len(s) < 8 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
