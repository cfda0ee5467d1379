//go:build linux

package storetest_test

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
	"github.com/dibs-gpu/dibs/store/storetest"
)

// The fake's full disk refuses in the bbolt store's words on a disk that is
// really full.
func TestDiskFullAgreesWithBolt(t *testing.T) {
	if os.Geteuid() != 0 {
		prereq.Missing(t, "filling a disk needs a tmpfs of its own, and mounting one needs root")
	}
	disk := t.TempDir()
	if err := syscall.Mount("tmpfs", disk, "tmpfs", 0, "size=1m,mode=0700"); err != nil {
		prereq.Missing(t, "cannot mount a tmpfs to fill (%v): run as root with CAP_SYS_ADMIN", err)
	}
	t.Cleanup(func() { syscall.Unmount(disk, 0) })
	dir := filepath.Join(disk, "data")
	real, err := store.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { real.Close() })
	f, err := os.Create(filepath.Join(disk, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	for buf := make([]byte, 4096); ; {
		if _, err := f.Write(buf); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatal(err)
			}
			break
		}
	}
	f.Close()
	var realErr error
	var l lease.Lease
	for i := uint64(1); i < 2000 && realErr == nil; i++ {
		l = mkLease(i, int(i%8))
		l.Note = strings.Repeat("x", words.MaxNoteLen)
		realErr = real.Put(l)
	}
	if realErr == nil {
		t.Fatal("2000 Puts fit on a full disk")
	}
	fake := storetest.New(storetest.Options{Path: real.Path()})
	fake.SetFault(storetest.DiskFull)
	if fakeErr := fake.Put(l); errText(fakeErr) != errText(realErr) || refusal.CodeOf(fakeErr) != refusal.CodeOf(realErr) {
		t.Errorf("full disk: bbolt says %q (%s), the fake %q (%s)", realErr, refusal.CodeOf(realErr), fakeErr, refusal.CodeOf(fakeErr))
	}
}
