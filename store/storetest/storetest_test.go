package storetest_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store/storetest"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func mkLease(token uint64, gpus ...int) lease.Lease {
	return lease.Lease{
		ID: lease.LeaseID("gpu-01", token), Node: "gpu-01", GPUs: gpus, User: "alice", UID: 1001,
		Token: token, Kind: lease.KindInteractive, Note: "sweep ☕",
		StartedAt: t0, ExpiresAt: t0.Add(4 * time.Hour),
	}
}

func mkEntry(n int) queue.QueueEntry {
	return queue.QueueEntry{
		ID: fmt.Sprintf("gpu-01-q%d", n), Origin: "gpu-01", User: "bob", UID: 1002, SubmittedAt: t0.Add(time.Duration(n) * time.Minute),
		Nodes: 1, GPUsPerNode: n, Duration: time.Hour, Kind: lease.KindBatch,
	}
}

// snapshot is everything a store gives back, as JSON.
func snapshot(t *testing.T, s queue.Store) string {
	t.Helper()
	ls, last, err := s.Load()
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	es, seq, err := s.Entries()
	if err != nil {
		t.Fatalf("Entries: %v", err)
	}
	led, err := s.Ledger(time.Time{})
	if err != nil {
		t.Fatalf("Ledger: %v", err)
	}
	b, _ := json.Marshal(struct {
		Leases    []lease.Lease
		LastToken uint64
		Entries   []queue.QueueEntry
		QueueSeq  uint64
		Ledger    []lease.LedgerEntry
	}{ls, last, es, seq, led})
	return string(b)
}

// seeded is a fake with a lease, an entry and a ledger entry in it.
func seeded(t *testing.T, opts storetest.Options) *storetest.Store {
	t.Helper()
	s := storetest.New(opts)
	for _, err := range []error{
		s.Put(mkLease(1, 0)), s.Put(mkLease(2, 1)), s.PutEntry(mkEntry(1), 1),
		s.End("gpu-01-1", lease.Ended(mkLease(1, 0), t0.Add(time.Hour), "released", "")),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	return s
}

// ops are the writes, each with a change it would make to seeded's data.
var ops = []struct {
	name string
	do   func(s queue.Store) error
}{
	{"Put", func(s queue.Store) error { return s.Put(mkLease(3, 2)) }},
	{"End", func(s queue.Store) error {
		return s.End("gpu-01-2", lease.Ended(mkLease(2, 1), t0.Add(2*time.Hour), "released", ""))
	}},
	{"PutEntry", func(s queue.Store) error { return s.PutEntry(mkEntry(2), 2) }},
	{"DeleteEntry", func(s queue.Store) error { return s.DeleteEntry("gpu-01-q1") }},
}

// Each fault fails each kind of write the way the disk would, leaves the
// data as it was, and leaves nothing of the write for a crash to keep.
func TestFaults(t *testing.T) {
	const path = "/srv/dibs/dibs.db"
	faults := []struct {
		fault storetest.Fault
		check func(t *testing.T, err error)
	}{
		{storetest.SyncError, func(t *testing.T, err error) {
			if !errors.Is(err, syscall.EIO) || refusal.CodeOf(err) != "" {
				t.Errorf("error %v (code %q), want EIO and no refusal code", err, refusal.CodeOf(err))
			}
		}},
		{storetest.DiskFull, func(t *testing.T, err error) {
			if refusal.CodeOf(err) != refusal.CodeUnavailable {
				t.Errorf("code %q, want %q (error %v)", refusal.CodeOf(err), refusal.CodeUnavailable, err)
			}
			for _, want := range []string{"the disk holding " + path + " is full", "free some space"} {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("error %q does not say %q", err, want)
				}
			}
		}},
	}
	for _, f := range faults {
		for _, op := range ops {
			t.Run(f.fault.String()+"/"+op.name, func(t *testing.T) {
				s := seeded(t, storetest.Options{Path: path})
				before, writes := snapshot(t, s), s.Writes()
				s.SetFault(f.fault)
				err := op.do(s)
				if err == nil {
					t.Fatal("the write succeeded")
				}
				f.check(t, err)
				if got := snapshot(t, s); got != before {
					t.Errorf("the failed write changed the store:\ngot  %s\nwant %s", got, before)
				}
				if s.Writes() != writes {
					t.Errorf("Writes = %d, want %d", s.Writes(), writes)
				}
				if err := op.do(s); err == nil {
					t.Error("SetFault lasted one write only")
				}
				if got := snapshot(t, s.Crash()); got != before {
					t.Errorf("after a crash:\ngot  %s\nwant %s", got, before)
				}
			})
		}
	}
}

// FailNext fails just the writes it names, in order; then writes succeed.
func TestFailNext(t *testing.T) {
	s := storetest.New(storetest.Options{})
	s.FailNext(storetest.DiskFull, 1)
	s.FailNext(storetest.SyncError, 1)
	steps := []struct {
		l    lease.Lease
		code refusal.Code
		eio  bool
	}{
		{mkLease(1, 0), refusal.CodeUnavailable, false},
		{mkLease(2, 1), "", true},
		{mkLease(3, 2), "", false},
	}
	for i, st := range steps {
		err := s.Put(st.l)
		if refusal.CodeOf(err) != st.code || errors.Is(err, syscall.EIO) != st.eio || (err == nil) != (st.code == "" && !st.eio) {
			t.Errorf("write %d: %v, want code %q, EIO %v", i+1, err, st.code, st.eio)
		}
	}
	if ls, last, _ := s.Load(); len(ls) != 1 || ls[0].ID != "gpu-01-3" || last != 3 {
		t.Errorf("after the faults: %d leases, token %d; want only gpu-01-3, token 3", len(ls), last)
	}
}

// A slow disk takes its delay through the injected sleep, and sleeps for
// real only when told to.
func TestSlowDisk(t *testing.T) {
	var mu sync.Mutex
	var slept []time.Duration
	s := storetest.New(storetest.Options{Sleep: func(d time.Duration) {
		mu.Lock()
		defer mu.Unlock()
		slept = append(slept, d)
	}})
	s.SetDelay(250 * time.Millisecond)
	for _, op := range ops[:1] {
		if err := op.do(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.PutEntry(mkEntry(1), 1); err != nil {
		t.Fatal(err)
	}
	if len(slept) != 2 || slept[0] != 250*time.Millisecond || s.Slept() != 500*time.Millisecond {
		t.Errorf("sleeps %v, Slept %s; want two of 250ms, 500ms", slept, s.Slept())
	}
	// With no Sleep the delay is counted, not slept: an hour per write
	// would time the test out.
	quiet := storetest.New(storetest.Options{})
	quiet.SetDelay(time.Hour)
	if err := quiet.Put(mkLease(1, 0)); err != nil {
		t.Fatal(err)
	}
	if quiet.Slept() != time.Hour {
		t.Errorf("Slept = %s, want 1h", quiet.Slept())
	}
}

// A crash while a slow write is in flight keeps everything acknowledged
// before it and nothing of the write; readers do not wait on a slow write.
func TestCrashDuringSlowWrite(t *testing.T) {
	entered, release := make(chan struct{}), make(chan struct{})
	s := seeded(t, storetest.Options{Sleep: func(time.Duration) {
		entered <- struct{}{}
		<-release
	}})
	before := snapshot(t, s)
	s.SetDelay(time.Second)
	done := make(chan error, 1)
	go func() { done <- s.Put(mkLease(9, 7)) }()
	<-entered
	if got := snapshot(t, s); got != before {
		t.Errorf("a write in flight is visible:\ngot  %s\nwant %s", got, before)
	}
	restarted := s.Crash()
	close(release)
	if err := <-done; !errors.Is(err, storetest.ErrCrashed) {
		t.Errorf("the write in flight returned %v, want ErrCrashed", err)
	}
	if got := snapshot(t, restarted); got != before {
		t.Errorf("after the crash:\ngot  %s\nwant %s", got, before)
	}
	if _, _, err := s.Load(); !errors.Is(err, storetest.ErrCrashed) {
		t.Errorf("Load on the crashed store: %v, want ErrCrashed", err)
	}
	// The restarted store is a store like any other, with no delay.
	if err := restarted.Put(mkLease(9, 7)); err != nil {
		t.Fatalf("Put after restart: %v", err)
	}
}

// Values handed in or out cannot change the store behind its back.
func TestValuesAreCopied(t *testing.T) {
	s := storetest.New(storetest.Options{})
	l := mkLease(1, 0, 1)
	if err := s.Put(l); err != nil {
		t.Fatal(err)
	}
	l.GPUs[0] = 7
	ls, _, _ := s.Load()
	ls[0].GPUs[1] = 6
	if ls, _, _ := s.Load(); ls[0].GPUs[0] != 0 || ls[0].GPUs[1] != 1 {
		t.Errorf("GPUs = %v after the caller changed its copies, want [0 1]", ls[0].GPUs)
	}
}

// Writers and readers at once, under -race: every acknowledged write lands.
func TestConcurrent(t *testing.T) {
	s := storetest.New(storetest.Options{})
	s.SetDelay(time.Millisecond) // counted, not slept
	var wg sync.WaitGroup
	for w := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 25 {
				tok := uint64(w*100 + i + 1)
				if err := s.Put(mkLease(tok, w)); err != nil {
					t.Error(err)
				}
				if i%5 == 0 {
					if err := s.End(lease.LeaseID("gpu-01", tok), lease.Ended(mkLease(tok, w), t0, "released", "")); err != nil {
						t.Error(err)
					}
				}
				if _, _, err := s.Load(); err != nil {
					t.Error(err)
				}
			}
		}()
	}
	wg.Wait()
	ls, last, _ := s.Load()
	led, _ := s.Ledger(time.Time{})
	if len(ls) != 8*20 || len(led) != 8*5 || last != 725 || s.Writes() != 8*30 {
		t.Errorf("%d leases, %d ledger entries, token %d, %d writes; want 160, 40, 725, 240", len(ls), len(led), last, s.Writes())
	}
}

func jsonOf(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}
