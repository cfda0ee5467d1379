package launch

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// DefaultLogMax caps a kept log: the newest output of a job, enough for a
// traceback and its training curve, not enough to fill a home.
const DefaultLogMax = 8 << 20

// LogDir is where a user's job logs live, below their home.
const LogDir = ".local/state/dibs/logs"

// LogName is the file a run's output is kept in, in LogDir, named by
// Spec.LogName (the agent's: the session and when the run started, unique
// per node), so nodes that share a home, and runs that share a session
// name, never write one file.
func LogName(name string) string { return name + ".log" }

// LogPath is where a session's output is kept for u.
func LogPath(u User, session string) string {
	return filepath.Join(u.Home, LogDir, LogName(session))
}

// pipeCommand is the shell command tmux's pipe-pane runs, as the user, to
// keep the pane's output.
func (l *Launcher) pipeCommand(u User, session string) string {
	file := LogPath(u, session)
	max := strconv.FormatInt(l.logMax, 10)
	if len(l.pipeLog) > 0 {
		q := make([]string, 0, len(l.pipeLog)+2)
		for _, a := range l.pipeLog {
			q = append(q, shellQuote(a))
		}
		return "exec " + strings.Join(append(q, shellQuote(file), max), " ")
	}
	dir := filepath.Dir(file)
	return "umask 077; mkdir -p " + shellQuote(dir) + " && exec head -c " + max + " >> " + shellQuote(file)
}

func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// LogChunk is part of a kept log.
type LogChunk struct {
	Data []byte
	// Size is the file's size when read; Inode tells a rotated file from
	// the one read before (a follower starts the new one from 0).
	Size  int64
	Inode uint64
}

// ReadLog reads up to n bytes at off of u's log of session: part "" is the
// current file, ".1" the one it rotated out. It reads as ReadUserFile
// does: as the user, no link followed below the home, a regular file owned
// by u that nobody else can write, waiting for a file system that does not
// answer within readAsUser's bounds. A missing log wraps fs.ErrNotExist.
func (l *Launcher) ReadLog(ctx context.Context, u User, session, part string, off int64, n int) (LogChunk, error) {
	if err := CheckName(session); err != nil {
		return LogChunk{}, err
	}
	if part != "" && part != ".1" {
		return LogChunk{}, errors.New("a log part is \"\" or \".1\"")
	}
	var out LogChunk
	rel := LogDir + "/" + LogName(session) + part
	err := l.readAsUser(ctx, u, rel, func() error {
		return openUnderHome(u, rel, -1, func(f *os.File, st *syscall.Stat_t) error {
			out.Size, out.Inode = st.Size, st.Ino
			if off < 0 || off > st.Size {
				off = st.Size
			}
			buf := make([]byte, min(int64(n), st.Size-off))
			k, err := f.ReadAt(buf, off)
			if err != nil && !errors.Is(err, io.EOF) {
				return fmt.Errorf("read %s: %w", LogPath(u, session)+part, err)
			}
			out.Data = buf[:k]
			return nil
		})
	})
	if err != nil {
		return LogChunk{}, err
	}
	return out, nil
}

// PipeLogArgs is the hidden `_pipe-log FILE MAX_BYTES` command that both
// binaries carry (dibsd's for this release's agents, dibs's for an agent
// of a release before dibsd): its words read here once, then PipeLog.
func PipeLogArgs(r io.Reader, file, maxBytes string) error {
	max, err := strconv.ParseInt(maxBytes, 10, 64)
	if err != nil || max <= 0 {
		return fmt.Errorf("bad size %q", maxBytes)
	}
	return PipeLog(r, file, max)
}

// PipeLog copies r (a pane's output, from tmux's pipe-pane) to file until
// r ends, keeping the newest output: when file reaches max bytes it becomes
// file.1 (replacing the one before) and a new file starts, so the log never
// takes more than twice max. It runs as the user, in their tmux server;
// the dibs binary's hidden `_pipe-log` command is this function.
func PipeLog(r io.Reader, file string, max int64) error {
	if max <= 0 {
		max = DefaultLogMax
	}
	if err := os.MkdirAll(filepath.Dir(file), 0o700); err != nil {
		return err
	}
	open := func() (*os.File, int64, error) {
		f, err := os.OpenFile(file, os.O_WRONLY|os.O_APPEND|os.O_CREATE|syscall.O_NOFOLLOW, 0o600)
		if err != nil {
			return nil, 0, err
		}
		st, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, err
		}
		return f, st.Size(), nil
	}
	f, size, err := open()
	if err != nil {
		return err
	}
	defer func() { f.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, rerr := r.Read(buf)
		for p := buf[:n]; len(p) > 0; {
			k := int(min(int64(len(p)), max-size))
			if k <= 0 {
				f.Close()
				if err := os.Rename(file, file+".1"); err != nil {
					return err
				}
				if f, size, err = open(); err != nil {
					return err
				}
				continue
			}
			if _, err := f.Write(p[:k]); err != nil {
				return err
			}
			size += int64(k)
			p = p[k:]
		}
		if rerr == io.EOF {
			return nil
		}
		if rerr != nil {
			return rerr
		}
	}
}
