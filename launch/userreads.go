package launch

import (
	"context"
	"fmt"
	"sync"
)

// Bounds on the reads of users' files still waiting for their file
// system (readAsUser): per user, and in all.
const (
	maxUserReads    = 4
	maxUserReadsAll = 32
)

// userReads counts the reads of users' files whose system calls have not
// returned, by uid. A read whose file system never answers (a hung network
// home; a FUSE mount of the user's own on a directory of theirs) holds its
// thread, which nothing can kill, and so its place here, for good.
type userReads struct {
	mu    sync.Mutex
	byUID map[int]int
	all   int
}

// take gives uid a place, or says why none is left.
func (r *userReads) take(uid int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.byUID[uid] >= maxUserReads:
		return fmt.Errorf("%d earlier reads of this user's files still wait for their file system (a network home that hangs?)", r.byUID[uid])
	case r.all >= maxUserReadsAll:
		return fmt.Errorf("%d earlier reads of users' files still wait for their file systems (a network home that hangs?)", r.all)
	}
	if r.byUID == nil {
		r.byUID = map[int]int{}
	}
	r.byUID[uid]++
	r.all++
	return nil
}

// give returns uid's place.
func (r *userReads) give(uid int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byUID[uid]--; r.byUID[uid] <= 0 {
		delete(r.byUID, uid)
	}
	r.all--
}

// readAsUser runs read, which reads what of u's files as openUnderHome
// does, on a thread with u's file-system identity, and waits for it until
// ctx ends or the call timeout passes. A read that has not answered by
// then is left to finish on its thread and keeps its place: at most
// maxUserReads of one user's, and maxUserReadsAll in all, may wait so,
// and past that a read is refused at once, so a file system that never
// answers cannot pile up the agent's threads (nor one user's stop the
// reads of another's).
func (l *Launcher) readAsUser(ctx context.Context, u User, what string, read func() error) error {
	if err := l.reads.take(u.UID); err != nil {
		return fmt.Errorf("read %s of %s: %w", what, u.Name, err)
	}
	done := make(chan error, 1)
	go func() {
		defer l.reads.give(u.UID)
		done <- read()
	}()
	callCtx, cancel := context.WithTimeout(ctx, l.callTimeout)
	defer cancel()
	select {
	case err := <-done:
		return err
	case <-callCtx.Done():
		if ctx.Err() != nil {
			return fmt.Errorf("read %s of %s: %w", what, u.Name, ctx.Err())
		}
		return fmt.Errorf("read %s of %s: its file system did not answer within %v", what, u.Name, l.callTimeout)
	}
}
