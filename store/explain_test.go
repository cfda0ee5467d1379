package store

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/dibs-gpu/dibs/base/refusal"
)

func TestExplain(t *testing.T) {
	s := &Bolt{path: "/var/lib/dibs/dibs.db"}
	tests := []struct {
		err  error
		code refusal.Code
	}{
		{&fs.PathError{Op: "write", Path: s.path, Err: syscall.ENOSPC}, refusal.CodeUnavailable},
		{syscall.EDQUOT, refusal.CodeUnavailable},
		// bbolt's grow and sync errors drop the errno (%s, not %w).
		{fmt.Errorf("file resize error: %s", syscall.ENOSPC), refusal.CodeUnavailable},
		{fmt.Errorf("file sync error: %s", &fs.PathError{Op: "sync", Path: s.path, Err: syscall.ENOSPC}), refusal.CodeUnavailable},
		{&fs.PathError{Op: "write", Path: s.path, Err: syscall.EROFS}, refusal.CodeUnavailable},
		{errors.New("something else"), ""},
	}
	for _, tt := range tests {
		got := s.explain(tt.err)
		if refusal.CodeOf(got) != tt.code {
			t.Errorf("explain(%v) = %v (code %q), want code %q", tt.err, got, refusal.CodeOf(got), tt.code)
		}
	}
}
