package lease

import (
	"cmp"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// A booking promises whole GPUs of one node to a person for a time in the
// future (`dibs book -g 4 --at "tomorrow 09:00" --for 3h`). It is a Lease
// with Booked set, so it is stored, gossiped and validated like one, and
// its id is a lease id of the node that owns the GPUs (the only node that
// grants them, so two bookings of one GPU never overlap). Until it starts
// it holds nothing: claims on its GPUs get a time limit that ends before it
// (or are refused when they asked for longer), extensions stop short of
// it, the queue plans around it; at its start the node turns it into a
// lease (Booked cleared), ending any lease on its GPUs that is past its own
// end by then.

// MinBeforeBooking is the least time a claim may have before a booking on
// its GPUs: a GPU booked from sooner than this counts as taken.
const MinBeforeBooking = time.Minute

// BookRequest is what a person books, made once at the edge (the agent's
// socket handler reads the words of an api.BookRequest into it) and carried
// as is to the node that grants it: the agents send it to each other as the
// book endpoint's request (agent/peer.BookRequest is this type), so its
// JSON names are the protocol's and must stay as v0.1.0 decodes them
// (Group and Lead came with protocol 7). Validate is every bound a booking
// is held to before any node plans it; the node's own rules
// (Table.PlanBooking) decide the rest.
//
// A field added here travels between agents, as one added to Claim does:
// omitempty, meaning "as before" when zero, pruned for protocol 6
// (dialect_v6.json). Start and Duration are always written: v0.1.0 wrote
// them so.
type BookRequest struct {
	// Count GPUs chosen by dibs, or exactly GPUs; one of the two.
	Count int   `json:"count,omitempty"`
	GPUs  []int `json:"gpus,omitempty"`
	// Start and Duration are the booked time; both are required.
	Start    time.Time     `json:"start"`
	Duration time.Duration `json:"duration"`
	// Kind is interactive or batch; empty means interactive.
	Kind Kind   `json:"kind,omitempty"`
	Note string `json:"note,omitempty"`
	// Model and Tags restrict the GPUs and the node, as for a claim.
	Model string   `json:"model,omitempty"`
	Tags  []string `json:"tags,omitempty"`
	// Run, when set, is started under the lease at Start (`dibs run
	// --at`); the booking keeps it as its Job.
	Run *job.RunSpec `json:"run,omitempty"`
	// RequestID names the booking so a retry (same id, same caller) gets
	// the booking the first try made instead of another.
	RequestID string `json:"request_id,omitempty"`
	// Group is the id of the multi-node booking this is a part of (its
	// first part's); Lead marks that first part, whose own id becomes the
	// group's. Both unset for a booking of one node. Protocol 7 on.
	Group string `json:"group,omitempty"`
	Lead  bool   `json:"lead,omitempty"`
	// Where is the --nodelist and --exclude it was made with; it never
	// travels (the edge picks the nodes).
	Where NodeChoice `json:"-"`
}

// Validate refuses a booking no node could grant as asked, with words for
// the person who asked: the edge runs it on the booking it made, and the
// owning node again on the booking the network brought (agent/peer runs it
// on every request it decodes). Whether tmux keeps a run's session name as
// given is the launcher's rule, checked by the agent beside it.
func (r BookRequest) Validate() error {
	if _, err := ParseKind(string(r.Kind)); err != nil {
		return err
	}
	if r.RequestID != "" && !ValidRequestID(r.RequestID) {
		return refusal.Invalidf("request id %s must be 8 to 64 letters, digits, '-' or '_'", words.QuoteInput(r.RequestID))
	}
	if err := CheckCountOrIDs(r.Count, r.GPUs); err != nil {
		return err
	}
	if err := r.Where.Check(); err != nil {
		return err
	}
	if err := r.Run.Check(); err != nil {
		return err
	}
	if r.Count < 0 || r.Count > words.MaxGPUsPerNode {
		return refusal.Invalidf("GPU count %d is out of range", r.Count)
	}
	if err := CheckGPUs(r.GPUs); err != nil {
		return err
	}
	if r.Duration < 0 || r.Duration > words.MaxDuration || !words.ValidSince(r.Start) {
		return refusal.Invalidf("booking time out of range")
	}
	if err := CheckTags(r.Tags); err != nil {
		return err
	}
	if len(r.Model) > words.MaxModelLen {
		return refusal.Invalidf("model %s is longer than %d bytes: give a part of the name, like H100", words.QuoteInput(r.Model), words.MaxModelLen)
	}
	if err := words.CheckText("model", r.Model); err != nil {
		return err
	}
	if r.Group != "" {
		if n, ok := NodeOfID(r.Group); !ok || words.ValidNodeName(n) != nil || r.Lead {
			return refusal.Invalidf("bad booking group %s", words.QuoteInput(termsafe.String(r.Group)))
		}
	}
	return words.CheckNote(r.Note)
}

// Bookings lists the table's bookings, soonest first.
func (t *Table) Bookings() []Lease {
	var out []Lease
	for _, e := range t.leases {
		if e.Booked {
			l := e.Lease
			l.Mono = nil
			out = append(out, l)
		}
	}
	slices.SortFunc(out, func(a, b Lease) int {
		return cmp.Or(a.StartedAt.Compare(b.StartedAt), cmp.Compare(a.Token, b.Token))
	})
	return out
}

// SplitBookings separates a node's bookings from its leases, for code that
// receives both together (a peer's gossiped state).
func SplitBookings(all []Lease) (leases, bookings []Lease) {
	for _, l := range all {
		if l.Booked {
			bookings = append(bookings, l)
		} else {
			leases = append(leases, l)
		}
	}
	return leases, bookings
}

// firstBooking returns the booking on any of gpus that starts first among
// those overlapping [from, to), except the one with id except; nil when
// none does.
func (t *Table) firstBooking(gpus []int, from, to time.Time, except string) *Lease {
	var first *Lease
	for _, e := range t.leases {
		b := &e.Lease
		if !b.Booked || b.ID == except || !b.StartedAt.Before(to) || !b.ExpiresAt.After(from) {
			continue
		}
		if !slices.ContainsFunc(gpus, b.Holds) {
			continue
		}
		if first == nil || b.StartedAt.Before(first.StartedAt) || b.StartedAt.Equal(first.StartedAt) && b.Token < first.Token {
			first = b
		}
	}
	return first
}

// fitBookings is the time limit a lease on gpus from now may have: dur, or
// less so that it ends when the first booking on them starts. A time limit
// the person chose (explicit) is never cut: the claim is refused instead,
// saying how long it could have.
func (t *Table) fitBookings(gpus []int, now time.Time, dur time.Duration, explicit bool) (time.Duration, error) {
	b := t.firstBooking(gpus, now, now.Add(dur), "")
	if b == nil {
		return dur, nil
	}
	room := b.StartedAt.Round(0).Sub(now.Round(0))
	if room < MinBeforeBooking {
		return 0, refusal.Errorf(refusal.CodeConflict, "%s: pick other GPUs, or wait until it ends at %s", describeBooking(b, now), b.ExpiresAt.Local().Format("Mon 15:04"))
	}
	if explicit {
		return 0, refusal.Errorf(refusal.CodeConflict, "%s: ask for --for %s at most, or other GPUs", describeBooking(b, now), words.FormatDuration(room.Truncate(time.Minute)))
	}
	return room, nil
}

// describeBooking says what a booking holds: "GPU 3 is booked by bob from
// Tue 09:00 to 12:00 (booking node01-12)".
func describeBooking(b *Lease, now time.Time) string {
	if b == nil {
		return "the GPUs are booked"
	}
	verb := "is"
	if len(b.GPUs) > 1 {
		verb = "are"
	}
	return fmt.Sprintf("%s %s booked by %s %s (booking %s)", gpuList(b.GPUs), verb, b.User, bookedWhen(b, now), b.ID)
}

// bookedWhen prints a booking's time: "from Tue 09:00 to 12:00".
func bookedWhen(b *Lease, now time.Time) string {
	from := b.StartedAt.Local()
	return fmt.Sprintf("from %s to %s", from.Format("Mon 15:04"), SpanEnd(from, b.ExpiresAt))
}

// SpanEnd prints the end of a span that starts at start so that it cannot
// be misread, in start's time zone: the time alone on the same day
// ("12:00"), with the weekday within the next six days ("Tue 09:00"), with
// the date beyond ("Tue Dec 8 16:13"; a week-long booking is not "16:13 to
// 16:13").
func SpanEnd(start, end time.Time) string {
	from, to := start, end.In(start.Location())
	switch {
	case to.YearDay() == from.YearDay() && to.Year() == from.Year():
		return to.Format("15:04")
	case to.Sub(from) < 6*24*time.Hour:
		return to.Format("Mon 15:04")
	}
	return to.Format("Mon Jan 2 15:04")
}

// Bookable lists the GPUs of a node that a booking of [start, end) may
// take (matching model), and says for each other GPU why not. leases are
// the node's leases and bookings together. A GPU is bookable when it is
// working, whole (not split into MIG instances), no lease on it (or on a
// part of it) runs past start, and no booking of it overlaps.
func Bookable(snap nodeprobe.Snapshot, leases []Lease, model string, start, end time.Time) (free []int, why []string) {
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		if !MatchModel(g, model) {
			continue
		}
		if r := unbookable(g, leases, start, end); r != "" {
			why = append(why, r)
			continue
		}
		free = append(free, g.Index)
	}
	return free, why
}

func unbookable(g *nodeprobe.GPU, leases []Lease, start, end time.Time) string {
	switch {
	case g.Error != "":
		return fmt.Sprintf("GPU %d is down", g.Index)
	case g.MIG == nodeprobe.MIGEnabled:
		return fmt.Sprintf("GPU %d is split into MIG instances", g.Index)
	}
	for i := range leases {
		l := &leases[i]
		if !l.Holds(g.Index) {
			continue
		}
		switch {
		case l.Booked && l.StartedAt.Before(end) && l.ExpiresAt.After(start):
			return fmt.Sprintf("GPU %d is booked by %s %s", g.Index, l.User, bookedWhen(l, start))
		case !l.Booked && l.ExpiresAt.After(start):
			return fmt.Sprintf("GPU %d is held by %s until %s", g.Index, l.User, l.ExpiresAt.Local().Format("Mon 15:04"))
		}
	}
	return ""
}

// PlanBooking decides a booking without changing the table: the booking to
// persist, or a refusal that says why and what to do. Its note was checked
// where the request was made (BookRequest.Validate).
func (t *Table) PlanBooking(c Caller, req BookRequest, snap nodeprobe.Snapshot, now time.Time, p Policy) (Lease, error) {
	var err error
	if req.Kind, err = kindOrDefault(req.Kind); err != nil {
		return Lease{}, err
	}
	if req.Kind == KindService {
		return Lease{}, refusal.Invalidf("a service is started with dibs serve, not booked")
	}
	if req.Duration <= 0 {
		return Lease{}, refusal.Invalidf("say how long the booking is: --for 3h")
	}
	dur, err := CheckDuration(req.Duration, req.Kind, p)
	if err != nil {
		return Lease{}, err
	}
	if err := CheckBookingLength(p, dur); err != nil {
		return Lease{}, err
	}
	if err := checkBookingTime(req.Start, now, p); err != nil {
		return Lease{}, err
	}
	if _, err := t.checkWhere(c, Claim{Tags: req.Tags, Model: req.Model, Duration: dur}, snap, dur, p); err != nil {
		return Lease{}, err
	}
	start := req.Start.Round(0)
	end := start.Add(dur)
	all := make([]Lease, 0, len(t.leases))
	for _, e := range t.leases {
		all = append(all, e.Lease)
	}
	slices.SortFunc(all, func(a, b Lease) int { return cmp.Compare(a.Token, b.Token) })
	mine := []Lease{}
	for _, b := range all {
		if b.Booked && b.User == c.User {
			mine = append(mine, b)
		}
	}
	n := req.Count
	if n == 0 {
		n = len(req.GPUs)
	}
	if err := CheckBookingQuota(p, c.User, mine, float64(n)*dur.Hours()); err != nil {
		return Lease{}, err
	}
	if max := p.bookMaxCount(); len(mine) >= max {
		return Lease{}, refusal.Errorf(refusal.CodeConflict, "you hold %d bookings on %s, the most one person may: unbook some (dibs bookings lists them), or wait until they begin", len(mine), t.node)
	}
	free, why := Bookable(snap, all, req.Model, start, end)
	var gpus []int
	if err := countDisagrees(req.Count, req.GPUs); err != nil {
		return Lease{}, err
	}
	switch {
	case len(req.GPUs) > 0:
		for _, g := range req.GPUs {
			gpu := FindGPU(snap, g)
			if gpu == nil {
				return Lease{}, refusal.Invalidf("no GPU %d on %s: it has GPUs %s", g, t.node, indexRange(snap))
			}
			if r := unbookable(gpu, all, start, end); r != "" {
				return Lease{}, refusal.Errorf(refusal.CodeConflict, "cannot book GPU %d of %s %s: %s: pick another GPU or time", g, t.node, bookingSpan(start, end), r)
			}
		}
		gpus = slices.Clone(req.GPUs)
		slices.Sort(gpus)
	case req.Count > 0:
		if len(free) < req.Count {
			return Lease{}, refusal.Errorf(refusal.CodeConflict, "asked to book %d GPU%s of %s %s but only %d can be: %s: book fewer, another time, or another node", req.Count, plural(req.Count), t.node, bookingSpan(start, end), len(free), strings.Join(why, "; "))
		}
		gpus = Place(snap, free, req.Count)
	default:
		return Lease{}, refusal.Invalidf("say how many GPUs to book (-g N) or which (--ids 0,2)")
	}
	l := t.newLease(c, Claim{Kind: req.Kind, Note: req.Note}, gpus, start, dur)
	l.Booked = true
	l.Group = req.Group
	if req.Lead {
		l.Group = l.ID
	}
	if req.Run != nil {
		j := req.Run.Job()
		if err := j.Check(); err != nil {
			return Lease{}, err
		}
		l.Job = j
	}
	return l, nil
}

// bookingSpan prints a booked time for a message: "Tue 09:00–12:00".
func bookingSpan(start, end time.Time) string {
	b := Lease{StartedAt: start, ExpiresAt: end}
	return bookedWhen(&b, start)
}

// checkBookingTime refuses a start in the past or further ahead than the
// policy allows.
func checkBookingTime(start, now time.Time, p Policy) error {
	if start.IsZero() {
		return refusal.Invalidf("say when the booking starts: --at \"tomorrow 09:00\"")
	}
	if !start.After(now) {
		return refusal.Invalidf("the booking would start %s, which is not in the future: claim now with dibs claim, or book a later time", start.Local().Format("Mon Jan 2 15:04"))
	}
	ahead := p.BookAhead
	if ahead <= 0 {
		ahead = DefaultPolicy().BookAhead
	}
	if start.Sub(now) > ahead {
		return refusal.Invalidf("bookings may start at most %s ahead; %s is %s away: book a nearer time", words.FormatDuration(ahead), start.Local().Format("Mon Jan 2 15:04"), words.FormatDuration(start.Sub(now).Round(time.Hour)))
	}
	return nil
}

// CheckBookingLength refuses a booking longer than Policy.BookMaxLength.
func CheckBookingLength(p Policy, dur time.Duration) error {
	if p.BookMaxLength > 0 && dur > p.BookMaxLength {
		return refusal.Invalidf("a booking may last at most %s here; this one is %s: book a shorter time, and claim or queue when it begins for more", words.FormatDuration(p.BookMaxLength), words.FormatDuration(dur))
	}
	return nil
}

// CheckBookingQuota refuses a booking of hours GPU-hours when user's
// bookings (not yet started) and it together pass Policy.BookMaxGPUHours.
func CheckBookingQuota(p Policy, user string, bookings []Lease, hours float64) error {
	if p.BookMaxGPUHours <= 0 {
		return nil
	}
	held := BookedHours(bookings, user)
	if held+hours > p.BookMaxGPUHours+1e-9 {
		return refusal.Errorf(refusal.CodeConflict, "one person may hold %g GPU-hours of bookings; you hold %g and this one is %g: unbook some (dibs bookings lists them), or book less", p.BookMaxGPUHours, roundHours(held), roundHours(hours))
	}
	return nil
}

// BookedHours is the GPU-hours of user's bookings that have not started.
func BookedHours(bookings []Lease, user string) float64 {
	h := 0.0
	for i := range bookings {
		b := &bookings[i]
		if b.Booked && b.User == user {
			h += float64(len(b.GPUs)) * b.ExpiresAt.Sub(b.StartedAt).Hours()
		}
	}
	return h
}

// bookMaxCount is BookMaxCount, or its default when unset.
func (p Policy) bookMaxCount() int {
	if p.BookMaxCount > 0 {
		return p.BookMaxCount
	}
	return DefaultBookMaxCount
}

func roundHours(h float64) float64 { return float64(int64(h*10+0.5)) / 10 }

// PlanBookingStart turns booking id into a lease at now: the lease to
// persist, and the leases on its GPUs to end first (any still there is past
// its own end, since claims and extensions stop before a booking).
func (t *Table) PlanBookingStart(id string, now time.Time) (Lease, []Lease, error) {
	e, ok := t.leases[id]
	if !ok || !e.Booked {
		return Lease{}, nil, refusal.Errorf(refusal.CodeNotFound, "no booking %s on %s", id, t.node)
	}
	l := e.Lease
	l.Mono, l.Booked, l.Job = nil, false, nil
	l.GPUs = slices.Clone(l.GPUs)
	if now.After(l.StartedAt) {
		l.StartedAt = now.Round(0)
	}
	var in []Lease
	for _, x := range t.List() {
		if slices.ContainsFunc(l.GPUs, x.Holds) {
			in = append(in, x)
		}
	}
	return l, in, nil
}

// CutBy returns the booking a lease's time limit was cut to end before: a
// booking of one of its GPUs that starts when the lease ends.
func CutBy(l Lease, bookings []Lease) (Lease, bool) {
	for _, b := range bookings {
		if b.Booked && b.StartedAt.Equal(l.ExpiresAt) && slices.ContainsFunc(l.GPUs, b.Holds) {
			return b, true
		}
	}
	return Lease{}, false
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}
