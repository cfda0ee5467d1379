package store

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"
	"testing"

	"github.com/dibs-gpu/dibs/lease"
)

func TestExplain(t *testing.T) {
	s := &Bolt{path: "/var/lib/dibs/dibs.db"}
	tests := []struct {
		err  error
		code lease.Code
	}{
		{&fs.PathError{Op: "write", Path: s.path, Err: syscall.ENOSPC}, lease.CodeUnavailable},
		{syscall.EDQUOT, lease.CodeUnavailable},
		// bbolt's grow and sync errors drop the errno (%s, not %w).
		{fmt.Errorf("file resize error: %s", syscall.ENOSPC), lease.CodeUnavailable},
		{fmt.Errorf("file sync error: %s", &fs.PathError{Op: "sync", Path: s.path, Err: syscall.ENOSPC}), lease.CodeUnavailable},
		{&fs.PathError{Op: "write", Path: s.path, Err: syscall.EROFS}, lease.CodeUnavailable},
		{errors.New("something else"), ""},
	}
	for _, tt := range tests {
		got := s.explain(tt.err)
		if lease.CodeOf(got) != tt.code {
			t.Errorf("explain(%v) = %v (code %q), want code %q", tt.err, got, lease.CodeOf(got), tt.code)
		}
	}
}
