package store_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store"
)

var (
	flips       = flag.Int("flips", 2500, "bit-flip drill: how many bits of the data pages to flip: every header bit, the rest spread evenly (0: every bit)")
	updateDrill = flag.Bool("update-drill", false, "rewrite testdata/drill.db from drillStore")
)

// state is everything a store gives back, as JSON, to compare before and
// after a flip.
type state struct {
	Leases    []lease.Lease
	LastToken uint64
	Entries   []queue.QueueEntry
	QueueSeq  uint64
	Ledger    []lease.LedgerEntry
}

// readState opens dir and reads it all; stage says which step refused.
func readState(dir string) (st state, stage string, err error) {
	s, err := store.Open(dir)
	if err != nil {
		return st, "open", err
	}
	defer s.Close()
	if st.Leases, st.LastToken, err = s.Load(); err != nil {
		return st, "load", err
	}
	if st.Entries, st.QueueSeq, err = s.Entries(); err != nil {
		return st, "entries", err
	}
	if st.Ledger, err = s.Ledger(time.Time{}); err != nil {
		return st, "ledger", err
	}
	return st, "", nil
}

// writeAndRead rewrites every lease and queue entry (so bbolt rewrites every
// page that holds them), grants a lease, ends one, removes a queue entry, and
// reads the store back after a reopen: a flip that changed nothing must not
// break the writes that follow either.
func writeAndRead(dir string) (state, string, error) {
	s, err := store.Open(dir)
	if err != nil {
		return state{}, "open to write", err
	}
	defer s.Close()
	store.NoSync(s)
	ls, _, err := s.Load()
	if err != nil {
		return state{}, "load to write", err
	}
	es, seq, err := s.Entries()
	if err != nil {
		return state{}, "entries to write", err
	}
	var errs []error
	for _, l := range ls {
		l.Note += "!"
		errs = append(errs, s.Put(l))
	}
	for _, e := range es {
		errs = append(errs, s.PutEntry(e, seq))
	}
	errs = append(errs,
		s.Put(mkLease(100, 7)),
		s.End("gpu-01-8", lease.Ended(mkLease(8, 0), t0.Add(2*time.Hour), "released", "")),
		s.DeleteEntry("gpu-01-q2"),
	)
	if err := errors.Join(errs...); err != nil {
		return state{}, "write", err
	}
	s.Close()
	st, stage, err := readState(dir)
	if stage != "" {
		stage = "reread " + stage
	}
	return st, stage, err
}

func (st state) json() string {
	b, _ := json.Marshal(st)
	return string(b)
}

// drillStore writes a store with leases over several pages (so the leases
// bucket has a branch page), changed and ended leases (so free pages hold
// stale copies), ledger entries, queue entries and both counters.
func drillStore(t *testing.T, dir string) {
	t.Helper()
	s := open(t, dir)
	var ls []lease.Lease
	for i := uint64(1); i <= 24; i++ {
		l := mkLease(i, int(i%8))
		l.User = []string{"alice", "bob", "chen"}[i%3]
		l.Note = strings.Repeat("n", int(i*7%60))
		if i%4 == 0 {
			l.Gang, l.Rank, l.Entry = "g-1", int(i%3), "gpu-01-q1#0"
		}
		ls = append(ls, l)
	}
	put(t, s, ls...)
	for _, l := range ls[:6] {
		if err := s.End(l.ID, lease.Ended(l, t0.Add(time.Hour), "released", "")); err != nil {
			t.Fatal(err)
		}
	}
	ls[10].Warned, ls[11].ExpiresAt = true, ls[11].ExpiresAt.Add(time.Hour)
	put(t, s, ls[10], ls[11])
	for i := 1; i <= 4; i++ {
		e := queue.QueueEntry{ID: fmt.Sprintf("gpu-01-q%d", i), Origin: "gpu-01", User: "bob", UID: 1002, SubmittedAt: t0,
			Nodes: 1, GPUsPerNode: i, Duration: time.Hour, Kind: lease.KindBatch}
		if i == 2 {
			e.Job = &job.Job{Command: []string{"python", "train.py"}, Dir: "/home/bob"}
		}
		if err := s.PutEntry(e, uint64(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.DeleteEntry("gpu-01-q3"); err != nil {
		t.Fatal(err)
	}
	s.Close()
}

// dataBits lists the bit positions worth flipping: every byte bbolt may read
// in the two header pages and in every branch and leaf page in use (headers,
// elements, keys and values, not the unused tail of a page). headers are the
// bits of the meta fields and of each page's header: the few bits whose flips
// a record checksum cannot see.
func dataBits(t *testing.T, path string, data []byte) (bits, headers []int) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true, PreLoadFreelist: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ps := db.Info().PageSize
	ne := binary.NativeEndian
	span := func(from, to int) {
		for b := from * 8; b < to*8; b++ {
			bits = append(bits, b)
		}
	}
	head := func(from, to int) {
		for b := from * 8; b < to*8; b++ {
			headers = append(headers, b)
		}
	}
	span(0, 16+64)
	span(ps, ps+16+64)
	head(16, 16+64)
	head(ps+16, ps+16+64)
	err = db.View(func(tx *bbolt.Tx) error {
		for id := 2; id*ps < len(data); id++ {
			info, err := tx.Page(id)
			if err != nil {
				return err
			}
			if info == nil || (info.Type != "leaf" && info.Type != "branch") {
				continue
			}
			p := data[id*ps:]
			end := 16 + 16*info.Count
			for i := range info.Count {
				el := p[16+16*i:]
				if info.Type == "leaf" {
					end = max(end, 16+16*i+int(ne.Uint32(el[4:])+ne.Uint32(el[8:])+ne.Uint32(el[12:])))
				} else {
					end = max(end, 16+16*i+int(ne.Uint32(el[0:])+ne.Uint32(el[4:])))
				}
			}
			span(id*ps, id*ps+end)
			head(id*ps, id*ps+16)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bits, headers
}

// TestBitFlipDrill flips one bit at a time in a store and opens it: each
// flip must be refused, naming the file, or change nothing a caller can see.
// A different answer would be leases (or tokens) handed out that someone
// holds. -flips=0 flips every bit of the data pages (slow: minutes).
//
// The store is testdata/drill.db, written by drillStore (-update-drill
// writes it again): bbolt lays pages out in map order, so a store written
// afresh would flip different bits on every run.
func TestBitFlipDrill(t *testing.T) {
	golden := filepath.Join("testdata", "drill.db")
	if *updateDrill {
		d := t.TempDir()
		drillStore(t, d)
		b, err := os.ReadFile(filepath.Join(d, store.FileName))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(golden, b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	orig, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	src := t.TempDir()
	path := filepath.Join(src, store.FileName)
	if err := os.WriteFile(path, orig, 0o600); err != nil {
		t.Fatal(err)
	}
	want, stage, err := readState(src)
	if err != nil {
		t.Fatalf("%s: %v", stage, err)
	}
	if len(want.Leases) != 18 || len(want.Ledger) != 6 || len(want.Entries) != 3 || want.LastToken != 24 || want.QueueSeq != 4 {
		t.Fatalf("drill store holds %d leases, %d ledger entries, %d queue entries, token %d, seq %d", len(want.Leases), len(want.Ledger), len(want.Entries), want.LastToken, want.QueueSeq)
	}
	// Reading must not have changed the file, or the flips below would
	// be flips of something else.
	if now, _ := os.ReadFile(path); string(now) != string(orig) {
		t.Fatal("opening and reading the store changed its file")
	}
	all, headers := dataBits(t, path, orig)
	positions := all
	if n := *flips; n > 0 && n < len(all) {
		positions = headers
		var rest []int
		for _, b := range all {
			if !slices.Contains(headers, b) {
				rest = append(rest, b)
			}
		}
		// An odd stride walks through every bit position within a byte.
		stride := max(1, len(rest)/max(1, n-len(headers)))
		if stride%2 == 0 {
			stride--
		}
		for i := 0; i < len(rest) && len(positions) < n; i += stride {
			positions = append(positions, rest[i])
		}
	}
	if len(positions) < 2000 && len(all) >= 2000 {
		t.Fatalf("drill flips only %d positions", len(positions))
	}
	// And some bits bbolt never reads (free pages, the unused tails of
	// pages), which must change nothing.
	inData := make(map[int]bool, len(all))
	for _, b := range all {
		inData[b] = true
	}
	var free []int
	for b := 0; b < len(orig)*8; b += 4099 {
		if !inData[b] {
			free = append(free, b)
		}
	}

	// What the writes after a harmless flip must leave.
	wantAfter, stage, err := writeAndRead(src)
	if err != nil {
		t.Fatalf("%s: %v", stage, err)
	}
	dir := t.TempDir()
	file := filepath.Join(dir, store.FileName)
	counts := map[string]int{}
	var different []string
	start := time.Now()
	for i, bit := range append(positions, free...) {
		where := ""
		if i >= len(positions) {
			where = " (free space)"
		}
		data := slices.Clone(orig)
		data[bit/8] ^= 1 << (bit % 8)
		// A new file each time: a lock bbolt leaked on a refused file
		// must not make the next one look in use.
		os.Remove(file)
		if err := os.WriteFile(file, data, 0o600); err != nil {
			t.Fatal(err)
		}
		got, stage, err := readState(dir)
		switch {
		case err != nil && !strings.Contains(err.Error(), file):
			t.Errorf("bit %d (page %d, byte %d): %s refused without naming the file: %v", bit, bit/8/4096, bit/8%4096, stage, err)
		case err != nil && strings.Contains(err.Error(), "in use"):
			t.Errorf("bit %d: %s says the file is in use: %v", bit, stage, err)
		case err != nil:
			counts["refused at "+stage+where]++
			var de *store.DamagedError
			if !errors.As(err, &de) {
				counts["  of which not as damaged"]++
			}
		case got.json() == want.json():
			counts["identical"+where]++
			if where != "" {
				break // never read, and every write overwrites a whole page
			}
			after, stage, err := writeAndRead(dir)
			if err != nil {
				t.Errorf("bit %d opened unchanged, then %s failed: %v", bit, stage, err)
			} else if after.json() != wantAfter.json() {
				t.Errorf("bit %d opened unchanged, but writes after it read back different", bit)
			}
		default:
			counts["different"+where]++
			different = append(different, fmt.Sprintf("bit %d (page %d, byte %d)", bit, bit/8/4096, bit/8%4096))
		}
	}
	t.Logf("%d flips (%d header bits and %d others) of %d data bits, and %d flips of free space, in a %d-byte file, %s:", len(positions), min(len(headers), len(positions)), len(positions)-min(len(headers), len(positions)), len(all), len(free), len(orig), time.Since(start).Round(time.Millisecond))
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range counts {
			if !yield(k) {
				return
			}
		}
	}) {
		t.Logf("  %-24s %5d", k, counts[k])
	}
	if len(different) > 0 {
		t.Errorf("%d flips opened with different contents: %s", len(different), strings.Join(different[:min(20, len(different))], ", "))
	}
}
