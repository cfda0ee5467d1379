package store_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.etcd.io/bbolt"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/store"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func mkLease(token uint64, gpus ...int) lease.Lease {
	return lease.Lease{
		ID: lease.LeaseID("gpu-01", token), Node: "gpu-01", GPUs: gpus, User: "alice", UID: 1001,
		Token: token, Kind: lease.KindInteractive, Note: "sweep ☕ 3",
		StartedAt: t0, ExpiresAt: t0.Add(4 * time.Hour),
	}
}

func open(t *testing.T, dir string) *store.Bolt {
	t.Helper()
	s, err := store.Open(dir)
	if err != nil {
		t.Fatalf("Open(%s): %v", dir, err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func put(t *testing.T, s *store.Bolt, ls ...lease.Lease) {
	t.Helper()
	for _, l := range ls {
		if err := s.Put(l); err != nil {
			t.Fatalf("Put(%s): %v", l.ID, err)
		}
	}
}

// sameJSON compares leases as they travel: time.Time's internals differ
// after a round trip (locations, monotonic readings), its meaning does not.
func sameJSON(t *testing.T, got, want any) {
	t.Helper()
	g, _ := json.Marshal(got)
	w, _ := json.Marshal(want)
	if string(g) != string(w) {
		t.Errorf("got  %s\nwant %s", g, w)
	}
}

func load(t *testing.T, s *store.Bolt) ([]lease.Lease, uint64) {
	t.Helper()
	ls, last, err := s.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	slices.SortFunc(ls, func(a, b lease.Lease) int { return int(a.Token) - int(b.Token) })
	return ls, last
}

func TestPutLoad(t *testing.T) {
	s := open(t, t.TempDir())
	if ls, last := load(t, s); len(ls) != 0 || last != 0 {
		t.Fatalf("new store holds %d leases, token %d", len(ls), last)
	}
	a, b := mkLease(1, 0, 1), mkLease(2, 4)
	b.Kind, b.Session, b.Warned, b.OverdueNoticed = lease.KindBatch, "dibs-gpu-01-2", true, true
	b.SignalledAt = t0.Add(4*time.Hour + time.Second)
	b.ExpiresAt = time.Now() // a monotonic reading must not matter
	put(t, s, a, b)
	got, last := load(t, s)
	sameJSON(t, got, []lease.Lease{a, b})
	if last != 2 {
		t.Errorf("token counter = %d, want 2", last)
	}
	// Put replaces a changed lease.
	a.ExpiresAt = a.ExpiresAt.Add(time.Hour)
	a.Warned = true
	put(t, s, a)
	got, _ = load(t, s)
	sameJSON(t, got, []lease.Lease{a, b})
}

func TestTokenCounterOnlyRises(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	steps := []struct {
		do   func() error
		want uint64
	}{
		{func() error { return s.Put(mkLease(5, 0)) }, 5},
		{func() error { return s.Put(mkLease(3, 1)) }, 5}, // an older grant saved late
		{func() error { return s.Put(mkLease(5, 0)) }, 5}, // the same lease again
		{func() error { return s.End("gpu-01-5", lease.Ended(mkLease(5, 0), t0.Add(time.Hour), "released", "")) }, 5},
		{func() error { return s.End("gpu-01-3", lease.Ended(mkLease(3, 1), t0.Add(time.Hour), "released", "")) }, 5},
		{func() error { return s.Put(mkLease(9, 2)) }, 9},
	}
	for i, st := range steps {
		if err := st.do(); err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if _, last := load(t, s); last != st.want {
			t.Errorf("step %d: token counter = %d, want %d", i, last, st.want)
		}
	}
	s.Close()
	// The counter outlives every lease that raised it.
	s = open(t, dir)
	put(t, s, mkLease(1, 7))
	if _, last := load(t, s); last != 9 {
		t.Errorf("after reopen and a Put of token 1: counter = %d, want 9", last)
	}
}

func TestEndAndLedger(t *testing.T) {
	s := open(t, t.TempDir())
	a, b, c := mkLease(1, 0), mkLease(2, 1, 2), mkLease(3, 3)
	put(t, s, a, b, c)
	ea := lease.Ended(a, t0.Add(time.Hour), "released", "")
	eb := lease.Ended(b, t0.Add(3*time.Hour), "admin", "root")
	for _, e := range []lease.LedgerEntry{ea, eb} {
		if err := s.End(e.LeaseID, e); err != nil {
			t.Fatalf("End(%s): %v", e.LeaseID, err)
		}
	}
	got, _ := load(t, s)
	sameJSON(t, got, []lease.Lease{c})

	tests := []struct {
		since time.Time
		want  []lease.LedgerEntry
	}{
		{time.Time{}, []lease.LedgerEntry{ea, eb}},
		{t0.Add(time.Hour), []lease.LedgerEntry{ea, eb}}, // at or after
		{t0.Add(time.Hour + time.Nanosecond), []lease.LedgerEntry{eb}},
		{t0.Add(3*time.Hour + time.Second), nil},
	}
	for _, tt := range tests {
		led, err := s.Ledger(tt.since)
		if err != nil {
			t.Fatalf("Ledger(%v): %v", tt.since, err)
		}
		sameJSON(t, led, tt.want)
	}
	if eb.GPUSeconds != 2*3*3600 {
		t.Errorf("b's ledger entry counts %v GPU-seconds, want %v", eb.GPUSeconds, 2*3*3600)
	}
}

func TestReopenKeepsEverything(t *testing.T) {
	dir := t.TempDir()
	s, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	pid, err := os.ReadFile(filepath.Join(dir, "agent.pid"))
	if err != nil || strings.TrimSpace(string(pid)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("agent.pid = %q, %v; want this process, %d", pid, err, os.Getpid())
	}
	a, b := mkLease(7, 0), mkLease(8, 1)
	put(t, s, a, b)
	e := lease.Ended(a, t0.Add(time.Hour), "released", "")
	if err := s.End(a.ID, e); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "agent.pid")); !os.IsNotExist(err) {
		t.Errorf("agent.pid outlives Close: %v", err)
	}

	s = open(t, dir)
	got, last := load(t, s)
	sameJSON(t, got, []lease.Lease{b})
	if last != 8 {
		t.Errorf("token counter = %d after reopen, want 8", last)
	}
	led, err := s.Ledger(time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	sameJSON(t, led, []lease.LedgerEntry{e})
	// The ledger keeps appending after a reopen.
	if err := s.End(b.ID, lease.Ended(b, t0.Add(2*time.Hour), "expired", "")); err != nil {
		t.Fatal(err)
	}
	if led, _ := s.Ledger(time.Time{}); len(led) != 2 || led[1].LeaseID != b.ID {
		t.Errorf("ledger after reopen and End = %+v, want a's then b's entry", led)
	}
}

func TestSecondOpenFailsFast(t *testing.T) {
	dir := t.TempDir()
	first := open(t, dir)
	start := time.Now()
	second, err := store.Open(dir)
	if took := time.Since(start); took > time.Second {
		t.Errorf("second Open took %s, want under 1s", took)
	}
	if err == nil {
		second.Close()
		t.Fatal("a second Open on the same data dir succeeded")
	}
	for _, want := range []string{dir, fmt.Sprintf("in use by another dibs agent (pid %d)", os.Getpid()), "stop it first", "--data-dir"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	// The refused Open did not disturb the holder.
	put(t, first, mkLease(1, 0))
	if pid, _ := os.ReadFile(filepath.Join(dir, "agent.pid")); strings.TrimSpace(string(pid)) != strconv.Itoa(os.Getpid()) {
		t.Errorf("agent.pid = %q after the refused Open", pid)
	}
	// Without the pid file it still says what is wrong.
	os.Remove(filepath.Join(dir, "agent.pid"))
	if _, err := store.Open(dir); err == nil || !strings.Contains(err.Error(), "in use by another process") {
		t.Errorf("second Open without agent.pid: %v, want it to say the dir is in use", err)
	}
}

// A file dibs cannot read stops the agent with the path and what to do; it
// never starts over with no leases, which would hand held GPUs out again.
func TestOpenRefusesDamagedFile(t *testing.T) {
	// A real store with enough leases to span many pages.
	src := t.TempDir()
	s := open(t, src)
	for i := uint64(1); i <= 300; i++ {
		l := mkLease(i, int(i%8))
		l.Note = strings.Repeat("n", 150)
		put(t, s, l)
	}
	s.Close()
	valid, err := os.ReadFile(filepath.Join(src, store.FileName))
	if err != nil {
		t.Fatal(err)
	}
	garbage := make([]byte, 64<<10)
	for i := range garbage {
		garbage[i] = byte(i*131 + i>>8)
	}
	tests := []struct {
		name string
		data []byte
	}{
		{"garbage", garbage},
		{"a few bytes of garbage", garbage[:100]},
		{"one page of garbage", garbage[:4096]},
		{"truncated to nothing", nil},
		{"truncated to its first page", valid[:4096]},
		{"truncated to its meta pages", valid[:8192]},
		{"truncated to a quarter", valid[:len(valid)/4]},
		{"truncated to half", valid[:len(valid)/2]},
		{"meta pages zeroed", append(make([]byte, 8192), valid[8192:]...)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			path := filepath.Join(dir, store.FileName)
			if err := os.WriteFile(path, tt.data, 0o600); err != nil {
				t.Fatal(err)
			}
			s, err := store.Open(dir)
			if err == nil {
				ls, _, lerr := s.Load()
				s.Close()
				if lerr == nil && len(ls) < 300 {
					t.Fatalf("Open accepted the damaged file and holds %d of 300 leases", len(ls))
				}
				// bbolt's pages are written in place; a cut that misses
				// every page it reads leaves a store that is whole.
				t.Skipf("the cut left every page bbolt reads (%d leases)", len(ls))
			}
			for _, want := range []string{path, "move it aside"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
			if strings.Contains(err.Error(), "in use") {
				t.Errorf("a damaged file is reported as in use: %v", err)
			}
			// Nothing repaired or grown behind the person's back. (Not
			// checked: a second Open in this process. When bbolt panics
			// inside its Open it keeps the file mapped, and the mapping
			// holds the lock until the process exits.)
			if got, _ := os.ReadFile(path); len(got) != len(tt.data) {
				t.Errorf("Open changed the damaged file from %d to %d bytes", len(tt.data), len(got))
			}
		})
	}
}

// A record damaged inside a sound bbolt file (a bug, a hand edit) stops the
// start, not a claim hours later.
func TestOpenRefusesDamagedRecord(t *testing.T) {
	tests := []struct {
		name   string
		bucket string
		key    string
		val    string
		msg    string
	}{
		{"lease that is not JSON", "leases", "gpu-01-1", "{not json", `lease "gpu-01-1"`},
		{"lease under another id", "leases", "gpu-01-1", `{"id":"gpu-01-2","gpus":[0]}`, "does not match its key"},
		{"lease with no GPUs", "leases", "gpu-01-1", `{"id":"gpu-01-1","gpus":[]}`, "does not match its key"},
		{"token counter of the wrong size", "meta", "last_token", "\x01", "token counter is 1 bytes"},
		{"a newer schema", "meta", "schema", "\x00\x00\x00\x00\x00\x00\x00\x02", "another version of dibs"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := t.TempDir()
			s := open(t, dir)
			put(t, s, mkLease(1, 0))
			s.Close()
			path := filepath.Join(dir, store.FileName)
			db, err := bbolt.Open(path, 0o600, nil)
			if err != nil {
				t.Fatal(err)
			}
			err = db.Update(func(tx *bbolt.Tx) error {
				return tx.Bucket([]byte(tt.bucket)).Put([]byte(tt.key), []byte(tt.val))
			})
			db.Close()
			if err != nil {
				t.Fatal(err)
			}
			s, err = store.Open(dir)
			if err == nil {
				s.Close()
				t.Fatal("Open accepted a damaged record")
			}
			for _, want := range []string{path, tt.msg, "move"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		})
	}
}

func TestLedgerReportsDamagedEntry(t *testing.T) {
	dir := t.TempDir()
	s := open(t, dir)
	put(t, s, mkLease(1, 0))
	if err := s.End("gpu-01-1", lease.Ended(mkLease(1, 0), t0.Add(time.Hour), "released", "")); err != nil {
		t.Fatal(err)
	}
	s.Close()
	path := filepath.Join(dir, store.FileName)
	db, err := bbolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket([]byte("ledger")).Put([]byte("\x00\x00\x00\x00\x00\x00\x00\x09"), []byte("]"))
	})
	db.Close()
	s = open(t, dir)
	if _, err := s.Ledger(time.Time{}); err == nil || !strings.Contains(err.Error(), path) {
		t.Errorf("Ledger over a damaged entry: %v, want an error naming %s", err, path)
	}
}

func BenchmarkPut(b *testing.B) {
	s, err := store.Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	l := mkLease(1, 0, 1)
	b.ReportAllocs()
	for b.Loop() {
		l.Token++
		l.ID = lease.LeaseID(l.Node, l.Token)
		if err := s.Put(l); err != nil {
			b.Fatal(err)
		}
	}
}
