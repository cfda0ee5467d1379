package peer

import (
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/outgrow/doctor"
)

// DoctorTally asks a node for its ledger since a time as doctor's running
// totals (doctor.Tally), a reply of bounded size, where History sends
// every ended lease page by page (156 pages for 100,000). Agents before it
// (protocol 6, and protocol 7 builds without it) refuse it: the caller
// then reads their History as before.
var DoctorTally = Endpoint[TallyRequest, TallyReply]{Name: "doctor-tally"}

// Bounds on one tally page: with a page's people and weeks (doctor's
// MaxTallyNames) it stays under MaxBody.
const (
	TallyWaitsPerPage = 4000
	TallyRanksPerPage = 200
)

// TallyRequest asks for page Page of a node's tally since Since. Running
// names the node's leases the caller sees running: the reply says which
// of them the ledger already has. Page 0 carries the counts and the first
// waits and gang ranks; later pages only further waits and ranks. Each
// page is cut from a fresh tally: a lease that ends between two pages may
// shift a wait across them (as asking a moment later would).
type TallyRequest struct {
	Since   time.Time `json:"since"`
	Running []string  `json:"running,omitempty"`
	Page    int       `json:"page,omitempty"`
}

// Validate implements Message.
func (r TallyRequest) Validate() error {
	if !words.ValidSince(r.Since) {
		return refusal.Invalidf("bad time")
	}
	if r.Page < 0 || r.Page > 1000 {
		return refusal.Invalidf("tally page %d out of range", r.Page)
	}
	if len(r.Running) > doctor.MaxTallyNames {
		return refusal.Invalidf("%d running leases, over %d", len(r.Running), doctor.MaxTallyNames)
	}
	for _, id := range r.Running {
		if _, ok := lease.NodeOfID(id); !ok || len(id) > 2*words.MaxNameLen {
			return refusal.Invalidf("%q is not a lease id", truncate(id))
		}
	}
	return nil
}

// TallyReply is one page of a node's tally; More says another follows.
type TallyReply struct {
	Tally doctor.Tally `json:"tally"`
	More  bool         `json:"more,omitempty"`
}

// Validate implements Message.
func (r TallyReply) Validate() error {
	if len(r.Tally.Waits) > TallyWaitsPerPage || len(r.Tally.GangRanks) > TallyRanksPerPage {
		return refusal.Invalidf("a tally page of %d waits and %d gang ranks, over %d and %d", len(r.Tally.Waits), len(r.Tally.GangRanks), TallyWaitsPerPage, TallyRanksPerPage)
	}
	if err := r.Tally.Validate(); err != nil {
		return refusal.Wrap(refusal.CodeInvalid, err)
	}
	return nil
}

// TallyPage is page p of t, as DoctorTally sends it: the counts on page
// 0, and each page's share of the waits and gang ranks.
func TallyPage(t doctor.Tally, p int) TallyReply {
	page, more := t.Page(p, TallyWaitsPerPage, TallyRanksPerPage)
	return TallyReply{Tally: page, More: more}
}
