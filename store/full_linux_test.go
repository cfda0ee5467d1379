//go:build linux

package store_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dibs-gpu/dibs/base/prereq"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/store"
)

// tinyDisk mounts a small tmpfs for the test and unmounts it afterwards. It
// skips when the test cannot mount (not root, or no CAP_SYS_ADMIN in a
// container).
func tinyDisk(t *testing.T, size string) string {
	t.Helper()
	if os.Geteuid() != 0 {
		prereq.Missing(t, "filling a disk needs a tmpfs of its own, and mounting one needs root")
	}
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size="+size+",mode=0700"); err != nil {
		prereq.Missing(t, "cannot mount a tmpfs to fill (%v): run as root with CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() {
		if err := syscall.Unmount(dir, 0); err != nil {
			t.Errorf("unmount %s: %v", dir, err)
		}
	})
	return dir
}

// fill writes a file until the disk refuses more.
func fill(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the disk: %v", err)
			}
			return
		}
	}
}

// A full disk refuses new leases with a message a person can act on, keeps
// every lease already saved readable, and recovers once there is room.
func TestFullDisk(t *testing.T) {
	disk := tinyDisk(t, "1m")
	dir := filepath.Join(disk, "data")
	s, err := store.Open(dir)
	if err != nil {
		t.Fatalf("Open on a 1 MiB tmpfs: %v", err)
	}
	t.Cleanup(func() { // before the unmount: cleanups run last-in first-out
		if s != nil {
			s.Close()
		}
	})

	var saved []lease.Lease
	next := uint64(1)
	newLease := func() lease.Lease {
		l := mkLease(next, int(next%8))
		l.Note = strings.Repeat("x", words.MaxNoteLen)
		next++
		return l
	}
	for range 5 {
		l := newLease()
		put(t, s, l)
		saved = append(saved, l)
	}
	filler := filepath.Join(disk, "filler")
	fill(t, filler)

	// bbolt reuses pages the file already has, so the first few Puts may
	// still fit; new leases need new pages soon.
	var full error
	var refused lease.Lease
	for range 2000 {
		l := newLease()
		if err := s.Put(l); err != nil {
			full, refused = err, l
			break
		}
		saved = append(saved, l)
	}
	if full == nil {
		t.Fatalf("2000 Puts fit on a full disk")
	}
	t.Logf("full after %d leases: %v", len(saved), full)
	if got := refusal.CodeOf(full); got != refusal.CodeUnavailable {
		t.Errorf("code on a full disk = %q, want %q (error %v)", got, refusal.CodeUnavailable, full)
	}
	for _, want := range []string{"disk holding", "is full", "free some space"} {
		if !strings.Contains(full.Error(), want) {
			t.Errorf("error %q does not say %q", full, want)
		}
	}

	// Reading still works and holds every lease that was acknowledged, and
	// not the refused one.
	check := func(when string, want []lease.Lease) {
		t.Helper()
		got, last := load(t, s)
		if len(got) != len(want) {
			t.Fatalf("%s: Load holds %d leases, want %d", when, len(got), len(want))
		}
		sameJSON(t, got, want)
		if last != want[len(want)-1].Token {
			t.Errorf("%s: token counter %d, want %d", when, last, want[len(want)-1].Token)
		}
	}
	check("on the full disk", saved)
	// An agent restarted while the disk is still full comes up and serves
	// what it holds.
	if err := s.Close(); err != nil {
		t.Fatalf("Close on a full disk: %v", err)
	}
	fill(t, filler+"2") // Close freed agent.pid's page
	if s, err = store.Open(dir); err != nil {
		t.Fatalf("reopen on a full disk: %v", err)
	}
	check("reopened on the full disk", saved)
	if err := s.End(saved[0].ID, lease.Ended(saved[0], t0, "released", "")); err == nil {
		saved = saved[1:] // an End may fit in freed pages; fine either way
	} else if refusal.CodeOf(err) != refusal.CodeUnavailable {
		t.Errorf("End on a full disk: %v, want a %s refusal", err, refusal.CodeUnavailable)
	}

	// Room again: the refused lease now saves, and everything survives a
	// reopen.
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	os.Remove(filler + "2")
	if err := s.Put(refused); err != nil {
		t.Fatalf("Put after freeing space: %v", err)
	}
	saved = append(saved, refused)
	for range 20 {
		l := newLease()
		put(t, s, l)
		saved = append(saved, l)
	}
	check("after freeing space", saved)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s, err = store.Open(dir)
	if err != nil {
		t.Fatalf("reopen after the disk was full: %v", err)
	}
	check("after reopening", saved)
	if _, err := s.Ledger(t0); err != nil {
		t.Errorf("Ledger after the disk was full: %v", err)
	}
}
