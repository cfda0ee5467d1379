//go:build linux

package store_test

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/store"
)

// schema1OnTinyDisk puts testdata/schema1.db on a small tmpfs of its own,
// cut to the pages it uses so that the upgrade must grow it.
func schema1OnTinyDisk(t *testing.T) (disk, dir, path string) {
	t.Helper()
	disk = tinyDisk(t, "1m")
	dir = filepath.Join(disk, "data")
	path = copyFixture(t, "schema1.db", dir)
	if err := os.Truncate(path, 16*4096); err != nil { // its high-water mark
		t.Fatal(err)
	}
	return disk, dir, path
}

// hasWarning fails unless one of s's warnings says every one of parts.
func hasWarning(t *testing.T, s *store.Bolt, parts ...string) {
	t.Helper()
	t.Logf("warnings: %q", s.Warnings())
	for _, w := range s.Warnings() {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(w, p)
		}
		if ok {
			return
		}
	}
	t.Errorf("warnings %q: none says %q", s.Warnings(), parts)
}

// An agent upgraded on a full disk still comes up and serves the leases it
// holds; the first write that fits does the upgrade.
func TestUpgradeOnFullDisk(t *testing.T) {
	want := loadSchema1(t)
	disk, dir, path := schema1OnTinyDisk(t)
	filler := filepath.Join(disk, "filler")
	fill(t, filler)
	s, err := store.Open(dir)
	if err != nil {
		t.Fatalf("Open of a schema-1 file on a full disk: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	hasWarning(t, s, path, "still in the old format", "is full")
	checkSchema1(t, s, want)
	l := mkLease(want.LastToken+1, 6)
	if err := s.Put(l); refusal.CodeOf(err) != refusal.CodeUnavailable || !strings.Contains(err.Error(), "is full") {
		t.Errorf("Put on the full disk: %v, want the disk-full refusal", err)
	}

	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	put(t, s, l)
	checkSchema1(t, s, want, l)
	s.Close()
	if _, stamp := rawView(t, path); len(stamp) != 12 {
		t.Errorf("stamp %x after the first write that fit, want schema 2", stamp)
	}
	s = open(t, dir)
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("warnings after the upgrade: %q", w)
	}
	checkSchema1(t, s, want, l)
}

// On a read-only disk the store opens read-only and serves what it holds.
func TestUpgradeOnReadOnlyDisk(t *testing.T) {
	want := loadSchema1(t)
	disk, dir, path := schema1OnTinyDisk(t)
	remount := func(flags uintptr) {
		t.Helper()
		if err := syscall.Mount("tmpfs", disk, "tmpfs", syscall.MS_REMOUNT|flags, ""); err != nil {
			t.Fatalf("remount %s: %v", disk, err)
		}
	}
	remount(syscall.MS_RDONLY)
	s, err := store.Open(dir)
	if err != nil {
		t.Fatalf("Open of a schema-1 file on a read-only disk: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	hasWarning(t, s, path, "read-only file system", "serves the leases it holds")
	hasWarning(t, s, path, "still in the old format")
	checkSchema1(t, s, want)
	if err := s.Put(mkLease(want.LastToken+1, 6)); refusal.CodeOf(err) != refusal.CodeUnavailable || !strings.Contains(err.Error(), "read-only") {
		t.Errorf("Put on a read-only disk: %v, want the read-only refusal", err)
	}
	s.Close()

	remount(0)
	s = open(t, dir)
	if w := s.Warnings(); len(w) != 0 {
		t.Errorf("warnings once writable: %q", w)
	}
	checkSchema1(t, s, want)
	s.Close()
	if _, stamp := rawView(t, path); len(stamp) != 12 {
		t.Errorf("stamp %x once writable, want schema 2", stamp)
	}
}
