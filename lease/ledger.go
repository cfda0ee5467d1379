package lease

import (
	"cmp"
	"math"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/runrecord"
)

// LedgerEntry is one ended lease, kept on its node so usage and fair-share
// survive restarts.
type LedgerEntry struct {
	LeaseID    string    `json:"lease_id"`
	Node       string    `json:"node"`
	User       string    `json:"user"`
	UID        int       `json:"uid"`
	GPUs       []int     `json:"gpus"`
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	GPUSeconds float64   `json:"gpu_seconds"`
	// Reason says why it ended: released, session-ended, expired, admin, ...
	Reason string `json:"reason"`
	// By is who ended it when that was not the holder (an admin).
	By string `json:"by,omitempty"`
	// Kind, Limit (its time limit when it ended, extensions included) and,
	// for a queued run, Entry (the attempt's key), Gang, Rank and QueuedAt
	// (when the entry was submitted) let `dibs doctor` measure queue waits
	// and gang waits, and `dibs replay` rebuild the requests, from the
	// ledger alone. Entries written before they existed leave them zero.
	Kind     Kind          `json:"kind,omitempty"`
	Limit    time.Duration `json:"limit,omitempty"`
	Entry    string        `json:"entry,omitempty"`
	Gang     string        `json:"gang,omitempty"`
	Rank     int           `json:"rank,omitempty"`
	QueuedAt time.Time     `json:"queued_at,omitzero"`
	// Reserved: it ended as an uncommitted gang reservation, so nothing
	// ran (a restarted node tells its origins so, from the ledger).
	Reserved bool `json:"reserved,omitempty"`
	// Figures are what its GPUs did while it ran (nil: written before
	// dibs kept them, or it never ran), and IdleGPUSeconds the part of
	// its GPU-seconds its GPUs sat at 0 % (summed when rows fold, so
	// `dibs usage` can tell held-but-idle from used).
	Figures        *runrecord.Figures `json:"figures,omitempty"`
	IdleGPUSeconds float64            `json:"idle_gpu_seconds,omitempty"`
	// Folded is how many ended leases a compacted row stands for (0 on
	// rows written before it was counted).
	Folded int `json:"folded,omitempty"`
	// ServiceRoot names the replica a service's copy was (ServiceRoot),
	// so that a restarted node remembers its stop (StopOfEnded).
	ServiceRoot string `json:"service_root,omitempty"`
}

// Ended builds the ledger entry for a lease ending at end. A MIG or shared
// lease counts its share of the GPU; a booking that never started counts
// nothing.
func Ended(l Lease, end time.Time, reason, by string) LedgerEntry {
	secs := end.Sub(l.StartedAt).Seconds()
	if secs < 0 || l.Booked {
		secs = 0
	}
	limit := max(l.ExpiresAt.Sub(l.StartedAt), 0)
	root := ""
	if l.IsService() {
		limit = 0 // a service has none (ServiceSpan is not a limit)
		root = l.ServiceRoot()
	}
	return LedgerEntry{
		LeaseID: l.ID, Node: l.Node, User: l.User, UID: l.UID, GPUs: l.GPUs,
		Start: l.StartedAt, End: end.Round(0), GPUSeconds: secs * l.Weight(),
		Reason: reason, By: by,
		Kind: l.Kind, Limit: limit, Entry: l.Entry, Gang: l.Gang, Rank: l.Rank,
		QueuedAt: l.QueuedAt, Reserved: !l.ReservedUntil.IsZero(), ServiceRoot: root,
	}
}

// ByEnd is the ledger's one order, as every node keeps its ledger and
// every reader merges them: by end, then by lease id.
func ByEnd(a, b LedgerEntry) int {
	if c := a.End.Compare(b.End); c != 0 {
		return c
	}
	return cmp.Compare(a.LeaseID, b.LeaseID)
}

// Store keeps a node's leases durable. Every method returns only after the
// change is on disk (fsynced), so the agent may acknowledge once it returns.
// A write that returns an error must not be acknowledged; later reads do not
// show it. An *Error with CodeUnavailable means the disk cannot take writes
// now (full, read-only) while reads still work; any other error is the disk
// failing or the file damaged. Implementations are safe for concurrent use.
// queue.Store adds the queue entries; package store is the bbolt one,
// store/storetest an in-memory one with injectable faults, for tests.
type Store interface {
	// Load returns every lease and the highest token ever granted.
	Load() (leases []Lease, lastToken uint64, err error)
	// Put writes a granted or changed lease and raises the token counter to
	// its token, in one transaction.
	Put(l Lease) error
	// End deletes a lease and appends its ledger entry, in one transaction.
	End(id string, e LedgerEntry) error
	// Ledger returns the entries that ended at or after since.
	Ledger(since time.Time) ([]LedgerEntry, error)
	Close() error
}

// Validate checks a ledger entry's shape wherever it comes from (the store,
// another agent answering `dibs doctor`): the same bounds as the lease it
// was, times in a sane range, GPU-seconds a finite non-negative number.
func (e *LedgerEntry) Validate() error {
	if !words.ValidToken(e.LeaseID, 2*words.MaxNameLen) {
		return refusal.Invalidf("a ledger entry has a bad lease id %s", words.QuoteInput(e.LeaseID))
	}
	if node, ok := NodeOfID(e.LeaseID); !ok || node != e.Node {
		return refusal.Invalidf("ledger entry %s does not belong to node %s", words.QuoteInput(e.LeaseID), words.QuoteInput(e.Node))
	}
	if e.User != "" && !words.ValidUserName(e.User) {
		return refusal.Invalidf("ledger entry %s has a bad user %s", e.LeaseID, words.QuoteInput(e.User))
	}
	if e.By != "" && !words.ValidUserName(e.By) {
		return refusal.Invalidf("ledger entry %s has a bad ender %s", e.LeaseID, words.QuoteInput(e.By))
	}
	if err := checkGPUs(e.GPUs, false); err != nil {
		return refusal.Wrapf(refusal.CodeInvalid, err, "ledger entry %s: %v", e.LeaseID, err)
	}
	for _, t := range []time.Time{e.Start, e.End, e.QueuedAt} {
		if !words.ValidSince(t) {
			return refusal.Invalidf("ledger entry %s has a time out of range", e.LeaseID)
		}
	}
	if e.GPUSeconds < 0 || math.IsNaN(e.GPUSeconds) || e.GPUSeconds > float64(words.MaxDuration/time.Second)*words.MaxGPUsPerNode {
		return refusal.Invalidf("ledger entry %s has GPU-seconds out of range", e.LeaseID)
	}
	if e.Limit < 0 || e.Limit > 2*words.MaxDuration {
		return refusal.Invalidf("ledger entry %s has a time limit out of range", e.LeaseID)
	}
	if e.IdleGPUSeconds < 0 || math.IsNaN(e.IdleGPUSeconds) || e.IdleGPUSeconds > e.GPUSeconds+1 || e.Folded < 0 {
		return refusal.Invalidf("ledger entry %s has idle GPU-seconds or a fold count out of range", e.LeaseID)
	}
	if e.Figures != nil {
		if err := e.Figures.Validate(); err != nil {
			return refusal.Wrapf(refusal.CodeInvalid, err, "ledger entry %s: %v", e.LeaseID, err)
		}
	}
	if e.Rank < 0 || e.Rank >= words.MaxGangNodes {
		return refusal.Invalidf("ledger entry %s has a rank out of range", e.LeaseID)
	}
	if e.Kind != "" {
		if err := checkKind(e.Kind); err != nil {
			return refusal.Wrapf(refusal.CodeInvalid, err, "ledger entry %s: %v", e.LeaseID, err)
		}
	}
	for _, s := range []string{e.Reason, e.Entry, e.Gang} {
		if s != "" && !words.ValidToken(s, 2*words.MaxNameLen) {
			return refusal.Invalidf("ledger entry %s has a bad field %s", e.LeaseID, words.QuoteInput(s))
		}
	}
	return nil
}

// ReasonCompacted marks a ledger entry that stands for several ended leases
// of one person on one day, folded together once they were older than the
// ledger keeps leases one by one.
const ReasonCompacted = "compacted"

// DefaultLedgerKeep is how long a node keeps its ended leases one by one
// unless configured: as long as `dibs doctor` can look back (90 days), and
// past the eight fair-share half-lives that decayed usage reads. Older ones
// are compacted into a row per person and day, so usage totals survive.
const DefaultLedgerKeep = 90 * 24 * time.Hour

// CompactLedger folds ended leases into one entry per person and UTC day
// they ended: the GPU-seconds summed, from the first start to the last end,
// under the id of the day's first lease, with Reason ReasonCompacted. What
// `dibs usage` sums over whole days and what fair-share decays come out the
// same; what one lease was (its GPUs, queue entry, gang) is gone. Days with
// a single entry are left as they are. It returns the entries to write and,
// by index into entries, those they replace.
func CompactLedger(entries []LedgerEntry) (rows []LedgerEntry, replaced [][]int) {
	type key struct {
		user string
		day  time.Time
	}
	groups := map[key][]int{}
	var order []key
	for i, e := range entries {
		k := key{e.User, e.End.UTC().Truncate(24 * time.Hour)}
		if groups[k] == nil {
			order = append(order, k)
		}
		groups[k] = append(groups[k], i)
	}
	for _, k := range order {
		idx := groups[k]
		if len(idx) < 2 {
			continue
		}
		first := entries[idx[0]]
		row := LedgerEntry{LeaseID: first.LeaseID, Node: first.Node, User: first.User, UID: first.UID,
			Start: first.Start, End: first.End, Reason: ReasonCompacted}
		for _, i := range idx {
			row.Folded += max(entries[i].Folded, 1)
			row.IdleGPUSeconds += entries[i].IdleGPUSeconds
			e := entries[i]
			if e.Start.Before(row.Start) {
				row.Start, row.LeaseID = e.Start, e.LeaseID
			}
			if e.End.After(row.End) {
				row.End = e.End
			}
			row.GPUSeconds += e.GPUSeconds
		}
		rows = append(rows, row)
		replaced = append(replaced, idx)
	}
	return rows, replaced
}

// LedgerCompactor is a Store that can fold its old ledger entries
// (CompactLedger) in one transaction each time: package store's bbolt file.
type LedgerCompactor interface {
	// CompactLedger folds the entries that ended before t, at most max of
	// them in one transaction (so a first pass over a long-neglected
	// ledger does not hold the writer for long), and says how many
	// entries went.
	CompactLedger(before time.Time, max int) (folded int, err error)
}

// DefaultLedgerPerUserDay is how many ended leases of one person a node
// keeps one by one in a UTC day unless configured: far above a person's
// work (dozens), far below a claim/release loop's hundred a second. Past
// it, the day's further leases of that person are folded as they end into
// one row (FoldInto), so their GPU-seconds still count.
const DefaultLedgerPerUserDay = 2000

// RunsPerLedgerDay is how many times DefaultLedgerPerUserDay (or the
// configured cap) a person's runs — leases with a session — are kept one by
// one in a day before they fold too: 20,000 by default, far past a day of
// work, so `dibs history` lists every real run, while a `dibs run -- true`
// loop (a tmux session each) is bounded like a claim/release loop.
const RunsPerLedgerDay = 10

// FoldInto adds ended lease e to row, the compacted row of the same person
// and day (or, when row is zero, starts one from e).
func FoldInto(row, e LedgerEntry) LedgerEntry {
	if row.LeaseID == "" {
		return LedgerEntry{LeaseID: e.LeaseID, Node: e.Node, User: e.User, UID: e.UID,
			Start: e.Start, End: e.End, GPUSeconds: e.GPUSeconds, Reason: ReasonCompacted,
			IdleGPUSeconds: e.IdleGPUSeconds, Folded: max(e.Folded, 1)}
	}
	row.Folded = max(row.Folded, 1) + max(e.Folded, 1)
	row.IdleGPUSeconds += e.IdleGPUSeconds
	if e.Start.Before(row.Start) {
		row.Start = e.Start
	}
	if e.End.After(row.End) {
		row.End = e.End
	}
	row.GPUSeconds += e.GPUSeconds
	return row
}

// LedgerFolder is a Store that can end a lease by folding its ledger entry
// into a compacted row it keeps (package store's bbolt file).
type LedgerFolder interface {
	// EndFolded deletes lease id and adds e to the compacted row at key
	// row (0: a new row), in one transaction, and says where the row is.
	// A row that is not a compacted row of e's person and day is left
	// alone and a new one made.
	EndFolded(id string, e LedgerEntry, row uint64) (uint64, error)
}
