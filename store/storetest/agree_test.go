package storetest_test

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/store"
	"github.com/dibs-gpu/dibs/store/storetest"
)

// The fake answers every step of one sequence as the bbolt store does: the
// same error (word for word) or none, and the same leases, token, queue and
// ledger after it, across a restart (Close and Open there, Crash here) and
// after Close.
func TestAgreesWithBolt(t *testing.T) {
	dir := t.TempDir()
	real, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { real.Close() })
	fake := storetest.New(storetest.Options{Path: filepath.Join(dir, store.FileName)})

	changed := mkLease(5, 0, 1)
	changed.Warned, changed.ExpiresAt = true, changed.ExpiresAt.Add(time.Hour)
	running := mkEntry(1)
	running.Running, running.Attempt = true, 2
	withJob := mkEntry(2)
	withJob.Job = &job.Job{Command: []string{"torchrun", "train.py"}, Dir: "/home/bob", Torchrun: true}
	now := mkLease(9, 3)
	now.StartedAt, now.ExpiresAt = time.Now(), time.Now().Add(time.Hour) // monotonic readings, local zone
	steps := []struct {
		name string
		do   func(s queue.Store) error
	}{
		{"grant", func(s queue.Store) error { return s.Put(mkLease(5, 0, 1)) }},
		{"grant an older token late", func(s queue.Store) error { return s.Put(mkLease(3, 2)) }},
		{"change a lease", func(s queue.Store) error { return s.Put(changed) }},
		{"a lease with no GPUs", func(s queue.Store) error { return s.Put(mkLease(6)) }},
		{"a lease with no id", func(s queue.Store) error { return s.Put(lease.Lease{GPUs: []int{0}}) }},
		{"queue", func(s queue.Store) error { return s.PutEntry(mkEntry(1), 1) }},
		{"queue a job", func(s queue.Store) error { return s.PutEntry(withJob, 3) }},
		{"change an entry, lower sequence", func(s queue.Store) error { return s.PutEntry(running, 2) }},
		{"an entry with no id", func(s queue.Store) error { return s.PutEntry(queue.QueueEntry{}, 9) }},
		{"end", func(s queue.Store) error {
			return s.End("gpu-01-3", lease.Ended(mkLease(3, 2), t0.Add(time.Hour), "released", ""))
		}},
		{"end a lease it does not hold", func(s queue.Store) error {
			return s.End("gpu-01-77", lease.Ended(mkLease(77, 4), t0.Add(3*time.Hour), "admin", "root"))
		}},
		{"remove an entry", func(s queue.Store) error { return s.DeleteEntry("gpu-01-q2") }},
		{"remove an entry it does not hold", func(s queue.Store) error { return s.DeleteEntry("gpu-01-q9") }},
		{"restart", func(s queue.Store) error { return nil }}, // handled below
		{"grant with a live clock", func(s queue.Store) error { return s.Put(now) }},
		{"end after the restart", func(s queue.Store) error {
			return s.End(changed.ID, lease.Ended(changed, t0.Add(2*time.Hour), "expired", ""))
		}},
	}
	for _, st := range steps {
		if st.name == "restart" {
			if err := real.Close(); err != nil {
				t.Fatal(err)
			}
			if real, err = store.Open(dir); err != nil {
				t.Fatal(err)
			}
			fake = fake.Crash()
		}
		rerr, ferr := st.do(real), st.do(fake)
		if errText(rerr) != errText(ferr) {
			t.Errorf("%s: bbolt says %q, the fake %q", st.name, errText(rerr), errText(ferr))
		}
		if r, f := snapshot(t, real), snapshot(t, fake); r != f {
			t.Errorf("%s: stores differ\nbbolt %s\nfake  %s", st.name, r, f)
		}
	}
	for _, since := range []time.Time{{}, t0.Add(time.Hour), t0.Add(90 * time.Minute), t0.Add(4 * time.Hour)} {
		r, rerr := real.Ledger(since)
		f, ferr := fake.Ledger(since)
		if rerr != nil || ferr != nil || jsonOf(r) != jsonOf(f) {
			t.Errorf("Ledger(%s): bbolt %s %v, fake %s %v", since, jsonOf(r), rerr, jsonOf(f), ferr)
		}
	}

	real.Close()
	fake.Close()
	if r, f := errText(real.Put(mkLease(10, 5))), errText(fake.Put(mkLease(10, 5))); r != f || r == "" {
		t.Errorf("Put after Close: bbolt %q, fake %q; want the same refusal", r, f)
	}
	_, _, rerr := real.Load()
	_, _, ferr := fake.Load()
	if errText(rerr) != errText(ferr) || rerr == nil {
		t.Errorf("Load after Close: bbolt %q, fake %q; want the same refusal", errText(rerr), errText(ferr))
	}
}

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
