package launch

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/poll"
)

// TestUserReadsAreBounded: a read of a user's files whose file system never
// answers (a hung network home; a FUSE mount of the user's own — neither
// can be made here, so the read blocks on a channel) is given up on at the
// call timeout and keeps its thread's place; past maxUserReads of one
// user's, that user's reads are refused at once while another user's still
// run; past maxUserReadsAll in all, every read is; places come back when
// the file system answers.
func TestUserReadsAreBounded(t *testing.T) {
	l := New(Options{CallTimeout: 50 * time.Millisecond})
	hung := make(chan struct{})
	hang := func() error { <-hung; return nil }
	answered := func() error { return nil }
	user := func(uid int) User { return User{Name: "u" + string(rune('a'+uid%26)), UID: uid, GID: uid} }
	ctx := t.Context()

	read := func(uid int, f func() error) (error, time.Duration) {
		began := time.Now()
		err := l.readAsUser(ctx, user(uid), "x", f)
		return err, time.Since(began)
	}
	for i := range maxUserReads {
		err, took := read(1, hang)
		if err == nil || !strings.Contains(err.Error(), "did not answer within") || took < 50*time.Millisecond {
			t.Fatalf("hung read %d of uid 1: %v after %v, want given up on at the 50ms call timeout", i, err, took)
		}
	}
	if err, took := read(1, answered); err == nil || !strings.Contains(err.Error(), "still wait") || took > 20*time.Millisecond {
		t.Errorf("a read of uid 1 with %d hung: %v after %v, want refused at once", maxUserReads, err, took)
	}
	if err, _ := read(2, answered); err != nil {
		t.Errorf("a read of uid 2 while uid 1's hang: %v, want it to run", err)
	}
	for uid := 2; l.readsHeld() < maxUserReadsAll; uid++ {
		if err, _ := read(uid/maxUserReads+2, hang); err == nil {
			t.Fatal("a hung read answered")
		}
	}
	if err, _ := read(1000, answered); err == nil || !strings.Contains(err.Error(), "reads of users' files still wait") {
		t.Errorf("a read with %d hung in all: %v, want refused at once", maxUserReadsAll, err)
	}

	// The file systems answer: every place comes back.
	close(hung)
	poll.WaitEvery(time.Millisecond, 5*time.Second, func() bool { return l.readsHeld() == 0 })
	if n := l.readsHeld(); n != 0 {
		t.Fatalf("%d places held after every read answered, want 0", n)
	}
	if err, _ := read(1, answered); err != nil {
		t.Errorf("a read of uid 1 once its file system answered: %v", err)
	}
	want := errors.New("permission denied")
	if err, _ := read(1, func() error { return want }); !errors.Is(err, want) {
		t.Errorf("a read's own error = %v, want %v", err, want)
	}
	block := make(chan struct{})
	defer close(block)
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	if err := l.readAsUser(cancelled, user(1), "x", func() error { <-block; return nil }); !errors.Is(err, context.Canceled) {
		t.Errorf("a read for a caller that gave up = %v, want context.Canceled", err)
	}
}

// readsHeld is how many reads hold a place.
func (l *Launcher) readsHeld() int {
	l.reads.mu.Lock()
	defer l.reads.mu.Unlock()
	return l.reads.all
}
