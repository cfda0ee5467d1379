package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"syscall"
)

// ErrUnsafeFile marks a refusal to read a file a user controls: a link, a
// FIFO or device, someone else's file, one others can write, or one over
// the size limit.
var ErrUnsafeFile = errors.New("unsafe file")

// ReadUserFile reads a file below u's home (rel such as
// ".ssh/authorized_keys") the way a root daemon must read what a user
// controls: with the user's file-system identity (so the kernel refuses
// what the user could not read), every component below the home opened
// without following links, the file a regular file owned by u or root that
// nobody else can write, read through a cap of max bytes. A missing file is
// an error wrapping fs.ErrNotExist; anything unsafe wraps ErrUnsafeFile. A
// file system that does not answer is waited for until ctx ends or the
// call timeout passes, within readAsUser's bounds. Every such file the
// agent reads goes through here or ReadLog.
func (l *Launcher) ReadUserFile(ctx context.Context, u User, rel string, max int64) ([]byte, error) {
	var data []byte
	err := l.readAsUser(ctx, u, rel, func() error {
		return openUnderHome(u, rel, max, func(f *os.File, _ *syscall.Stat_t) error {
			var err error
			data, err = io.ReadAll(io.LimitReader(f, max+1))
			if err != nil {
				return fmt.Errorf("read %s: %w", f.Name(), err)
			}
			if int64(len(data)) > max {
				return fmt.Errorf("%s is over %d bytes: %w", f.Name(), max, ErrUnsafeFile)
			}
			return nil
		})
	})
	if err != nil {
		return nil, err
	}
	return data, nil
}

// openUnderHome opens rel below u's home as ReadUserFile describes and
// hands the file to use, on the thread that has u's file-system identity.
// max < 0 puts no cap on the file's size (the caller reads a bounded part).
func openUnderHome(u User, rel string, max int64, use func(f *os.File, st *syscall.Stat_t) error) error {
	parts := strings.Split(rel, "/")
	for _, p := range parts {
		if p == "" || p == "." || p == ".." {
			return fmt.Errorf("read %s of %s: bad relative path", rel, u.Name)
		}
	}
	return asUserFS(u, func() error {
		dir, err := syscall.Open(u.Home, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if err != nil {
			return &os.PathError{Op: "open", Path: u.Home, Err: err}
		}
		defer func() { syscall.Close(dir) }()
		path := u.Home
		for i, p := range parts {
			path += "/" + p
			last := i == len(parts)-1
			flags := syscall.O_RDONLY | syscall.O_NOFOLLOW | syscall.O_CLOEXEC | syscall.O_NONBLOCK | syscall.O_NOCTTY
			if !last {
				flags |= syscall.O_DIRECTORY
			}
			fd, err := openat(dir, p, flags)
			if err != nil {
				if errors.Is(err, syscall.ELOOP) || errors.Is(err, syscall.ENOTDIR) {
					return fmt.Errorf("%s is a link or not a directory: %w", path, ErrUnsafeFile)
				}
				return &os.PathError{Op: "open", Path: path, Err: err}
			}
			syscall.Close(dir)
			dir = fd
			if err := checkOwned(fd, path, u, last, max); err != nil {
				return err
			}
		}
		var st syscall.Stat_t
		if err := syscall.Fstat(dir, &st); err != nil {
			return &os.PathError{Op: "stat", Path: path, Err: err}
		}
		f := os.NewFile(uintptr(dir), path)
		dir = -1
		defer f.Close()
		return use(f, &st)
	})
}

// checkOwned refuses a component that is not u's (or root's), that others
// can write, or (for the file) that is not a small regular file.
func checkOwned(fd int, path string, u User, file bool, max int64) error {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if int(st.Uid) != u.UID && st.Uid != 0 {
		return fmt.Errorf("%s belongs to uid %d, not %s: %w", path, st.Uid, u.Name, ErrUnsafeFile)
	}
	if st.Mode&0o022 != 0 {
		return fmt.Errorf("%s is writable by group or others (mode %o): %w", path, st.Mode&0o777, ErrUnsafeFile)
	}
	if !file {
		return nil
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFREG {
		return fmt.Errorf("%s is not a regular file: %w", path, ErrUnsafeFile)
	}
	if max >= 0 && st.Size > max {
		return fmt.Errorf("%s is %d bytes, over %d: %w", path, st.Size, max, ErrUnsafeFile)
	}
	return nil
}

func openat(dir int, name string, flags int) (int, error) {
	for {
		fd, err := syscall.Openat(dir, name, flags, 0)
		if err != syscall.EINTR {
			return fd, err
		}
	}
}
