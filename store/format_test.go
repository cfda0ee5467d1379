package store_test

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store"
)

// schema1 is what testdata/schema1.db holds, as the schema-1 dibs read it
// back (testdata/schema1.json, written by that dibs with the file).
type schema1 struct {
	Leases    []lease.Lease       `json:"leases"`
	LastToken uint64              `json:"last_token"`
	Entries   []queue.QueueEntry  `json:"entries"`
	QueueSeq  uint64              `json:"queue_seq"`
	Ledger    []lease.LedgerEntry `json:"ledger"`
}

func loadSchema1(t *testing.T) schema1 {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "schema1.json"))
	if err != nil {
		t.Fatal(err)
	}
	var want schema1
	if err := json.Unmarshal(b, &want); err != nil {
		t.Fatal(err)
	}
	return want
}

// copyFixture puts a testdata store into dir as its dibs.db.
func copyFixture(t *testing.T, name, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, store.FileName)
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// checkSchema1 asserts s serves what the schema-1 dibs had, plus extra.
func checkSchema1(t *testing.T, s *store.Bolt, want schema1, extra ...lease.Lease) {
	t.Helper()
	ls, last, err := s.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	wantLeases, wantToken := slices.Clone(want.Leases), want.LastToken
	for _, l := range extra {
		wantLeases, wantToken = append(wantLeases, l), max(wantToken, l.Token)
	}
	byID := func(a, b lease.Lease) int { return strings.Compare(a.ID, b.ID) }
	slices.SortFunc(ls, byID)
	slices.SortFunc(wantLeases, byID)
	sameJSON(t, ls, wantLeases)
	if last != wantToken {
		t.Errorf("token counter %d, want %d", last, wantToken)
	}
	es, seq, err := s.Entries()
	if err != nil {
		t.Fatalf("Entries: %v", err)
	}
	sameJSON(t, es, want.Entries)
	if seq != want.QueueSeq {
		t.Errorf("queue sequence %d, want %d", seq, want.QueueSeq)
	}
	led, err := s.Ledger(time.Time{})
	if err != nil {
		t.Fatalf("Ledger: %v", err)
	}
	sameJSON(t, led, want.Ledger)
}

// rawView reads the file with bbolt alone: its transaction id and the raw
// schema stamp.
func rawView(t *testing.T, path string) (txid int, stamp []byte) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, &bbolt.Options{ReadOnly: true})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	db.View(func(tx *bbolt.Tx) error {
		txid = tx.ID()
		stamp = append([]byte(nil), tx.Bucket([]byte("meta")).Get([]byte("schema"))...)
		return nil
	})
	return txid, stamp
}

// A file written by the schema-1 dibs opens with everything in it, is
// upgraded in one transaction, and keeps working.
func TestUpgradeSchema1(t *testing.T) {
	want := loadSchema1(t)
	dir := t.TempDir()
	path := copyFixture(t, "schema1.db", dir)
	before, stamp := rawView(t, path)
	if len(stamp) != 8 || binary.BigEndian.Uint64(stamp) != 1 {
		t.Fatalf("fixture stamp %x, want schema 1", stamp)
	}
	s := open(t, dir)
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("warnings on a sound schema-1 file: %q", w)
	}
	checkSchema1(t, s, want)
	s.Close()
	after, stamp := rawView(t, path)
	if after != before+1 {
		t.Errorf("the upgrade took %d transactions, want 1", after-before)
	}
	if len(stamp) != 12 || binary.BigEndian.Uint64(stamp) != 2 {
		t.Errorf("stamp after the upgrade %x, want schema 2 and its checksum", stamp)
	}

	s = open(t, dir)
	checkSchema1(t, s, want)
	// Writes after the upgrade: the ledger continues after the 8 old entries.
	l := mkLease(want.LastToken+1, 5)
	put(t, s, l)
	e := lease.Ended(want.Leases[0], t0.Add(9*time.Hour), "released", "")
	if err := s.End(want.Leases[0].ID, e); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, dir)
	ls, last, err := s.Load()
	if err != nil || len(ls) != len(want.Leases) || last != l.Token {
		t.Errorf("after writes: %d leases, token %d, %v; want %d leases, token %d", len(ls), last, err, len(want.Leases), l.Token)
	}
	led, _ := s.Ledger(time.Time{})
	sameJSON(t, led, append(want.Ledger, e))
}

// flipByte changes one byte of the file at off.
func flipByte(t *testing.T, path string, off int) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	b[off] ^= 0x20
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
}

// metaField reads a uint64 of the header page id (0 or 1); off is from the
// start of the meta fields (root 16, freelist 32, pgid 40, txid 48).
func metaField(t *testing.T, path string, page, off int) uint64 {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return binary.NativeEndian.Uint64(b[page*4096+16+off:])
}

// rawUpdate changes the file with bbolt alone, as a bug or a hand edit would.
func rawUpdate(t *testing.T, path string, fn func(tx *bbolt.Tx) error) {
	t.Helper()
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if err := db.Update(fn); err != nil {
		t.Fatal(err)
	}
}

// Damage that every record still passing its own checksum would hide, and
// damage to bbolt's own pages, stops the start with the file named.
func TestOpenRefusesDamage(t *testing.T) {
	newest := func(t *testing.T, path string) int {
		if metaField(t, path, 1, 48) > metaField(t, path, 0, 48) {
			return 1
		}
		return 0
	}
	tests := []struct {
		name   string
		damage func(t *testing.T, path string)
		msg    string
	}{
		{"a lease record deleted", func(t *testing.T, path string) {
			rawUpdate(t, path, func(tx *bbolt.Tx) error { return tx.Bucket([]byte("leases")).Delete([]byte("gpu-01-7")) })
		}, "records are missing, repeated or stale"},
		{"a queue entry deleted", func(t *testing.T, path string) {
			rawUpdate(t, path, func(tx *bbolt.Tx) error { return tx.Bucket([]byte("queue")).Delete([]byte("gpu-01-q1")) })
		}, "records are missing, repeated or stale"},
		{"a lease under another key", func(t *testing.T, path string) {
			rawUpdate(t, path, func(tx *bbolt.Tx) error {
				b := tx.Bucket([]byte("leases"))
				return b.Put([]byte("gpu-01-99"), append([]byte(nil), b.Get([]byte("gpu-01-7"))...))
			})
		}, `lease "gpu-01-99": record does not match its key and checksum`},
		{"an unknown bucket", func(t *testing.T, path string) {
			rawUpdate(t, path, func(tx *bbolt.Tx) error { _, err := tx.CreateBucket([]byte("leasez")); return err })
		}, `unknown bucket "leasez"`},
		{"the queue bucket gone", func(t *testing.T, path string) {
			rawUpdate(t, path, func(tx *bbolt.Tx) error { return tx.DeleteBucket([]byte("queue")) })
		}, "queue bucket is missing"},
		{"the newer header page damaged", func(t *testing.T, path string) {
			// bbolt alone would fall back to the older header: the state
			// before the last acknowledged write.
			flipByte(t, path, newest(t, path)*4096+16+20)
		}, "fails its checksum"},
		{"the older header page damaged", func(t *testing.T, path string) {
			flipByte(t, path, (1-newest(t, path))*4096+16+20)
		}, "fails its checksum"},
		{"the page of bucket names emptied", func(t *testing.T, path string) {
			b, _ := os.ReadFile(path)
			root := metaField(t, path, newest(t, path), 16)
			binary.NativeEndian.PutUint16(b[root*4096+10:], 0) // its element count
			os.WriteFile(path, b, 0o600)
		}, "holds no buckets, yet"},
		{"a page pointer that loops", func(t *testing.T, path string) {
			// bbolt itself would walk this branch page for ever.
			b, _ := os.ReadFile(path)
			for id := 2; id*4096 < len(b); id++ {
				p := b[id*4096:]
				if binary.NativeEndian.Uint64(p) == uint64(id) && binary.NativeEndian.Uint16(p[8:]) == 0x01 {
					binary.NativeEndian.PutUint64(p[16+8:], uint64(id))
					os.WriteFile(path, b, 0o600)
					return
				}
			}
			t.Fatal("no branch page in the store")
		}, "referenced twice"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := copyFixture(t, "drill.db", dir)
			tt.damage(t, path)
			s, err := store.Open(dir)
			if err == nil {
				s.Close()
				t.Fatal("Open accepted the damaged store")
			}
			var de *store.DamagedError
			if !errors.As(err, &de) {
				t.Errorf("error %v is not a DamagedError", err)
			}
			for _, want := range []string{path, tt.msg, "move it aside to start empty, knowing its leases are lost"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

// Damage to the usage ledger costs usage history, not leases: the agent
// starts, warns, and every read of the ledger names the file.
func TestDamagedLedgerWarns(t *testing.T) {
	dir := t.TempDir()
	path := copyFixture(t, "drill.db", dir)
	rawUpdate(t, path, func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte("ledger")).Delete(binary.BigEndian.AppendUint64(nil, 2))
	})
	s := open(t, dir)
	if w := s.Warnings(); len(w) != 1 || !strings.Contains(w[0], "usage ledger in "+path+" is damaged") {
		t.Errorf("warnings %q, want one about the usage ledger in %s", w, path)
	}
	if ls, _, err := s.Load(); err != nil || len(ls) != 18 {
		t.Errorf("Load: %d leases, %v; want all 18", len(ls), err)
	}
	if _, err := s.Ledger(time.Time{}); err == nil || !strings.Contains(err.Error(), path) || !strings.Contains(err.Error(), "missing, repeated or stale") {
		t.Errorf("Ledger: %v, want a refusal naming %s", err, path)
	}
}

// A lease Load would refuse is refused when it is written, not at the next
// start.
func TestPutRefusesWhatLoadWould(t *testing.T) {
	s := open(t, t.TempDir())
	for _, l := range []lease.Lease{{ID: "gpu-01-1"}, {GPUs: []int{0}}} {
		if err := s.Put(l); err == nil || !strings.Contains(err.Error(), "needs an id and at least one GPU") {
			t.Errorf("Put(%+v): %v, want a refusal", l, err)
		}
	}
	if ls, _ := load(t, s); len(ls) != 0 {
		t.Errorf("the refused leases were saved: %v", ls)
	}
}
