package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/api"
)

// The output of several ranks, in the foreground (`dibs run --follow`,
// `dibs logs -f` on a gang): each rank's kept log is read where its node
// keeps it, as `dibs logs` reads one, and printed line by line with the
// rank in front when there are several ranks ("0: …", "1: …", as
// srun --label prints them). Nothing new travels between agents: the
// client polls each rank's log through its own agent.

// followPoll is how often a followed log is read: a file has no change
// signal to wait on across nodes.
const followPoll = 500 * time.Millisecond

// maxPartial is how long a line without an end may grow before it is
// printed anyway (a progress bar redrawn with \r never ends its line).
const maxPartial = 64 << 10

// follower prints every rank of one run as its logs grow.
type follower struct {
	cl *api.Client
	w  io.Writer
	// id is the run as the person named it; the saved positions are
	// kept under it (followState).
	id string
	// filter drops the escape sequences that act on a terminal (a
	// terminal is written to and --raw was not given).
	filter bool
	// ranks are the ranks followed; a rank met for the first time is
	// printed from the start of its kept log, its rotated part first,
	// unless a resumed position says where.
	ranks map[int]*rankStream
	// label forces the rank prefix even for one rank (a gang whose other
	// ranks' logs are not known yet).
	label bool
	saved followState
	// save says whether positions are written for --resume.
	save bool
	// only is the one rank followed (--rank), or -1 for every rank.
	only int
}

// rankStream is one rank's log and how far it has been printed.
type rankStream struct {
	src api.LogSource
	pos logPos
	// partial is the raw end of the log after the last whole line
	// printed: read, not yet printed (its bytes count as unread in the
	// saved position).
	partial []byte
	ef      *escapeFilter
	buf     bytes.Buffer
	// started: the reads have begun (the rotated part, when reading from
	// the start, is read once, first).
	started bool
}

func newFollower(cl *api.Client, w io.Writer, id string, filter bool) *follower {
	f := &follower{cl: cl, w: w, id: id, filter: filter, ranks: map[int]*rankStream{}, save: validStateName(id), only: -1}
	f.saved = followState{ID: id, Ranks: map[string]savedRank{}}
	return f
}

// update takes the run's current log sources: a new rank, or a rank whose
// lease changed (a requeued gang's next attempt), is followed from the
// start of its log, or from a resumed position.
func (f *follower) update(srcs []api.LogSource) {
	for _, s := range srcs {
		if f.only >= 0 && s.Rank != f.only {
			continue
		}
		r, ok := f.ranks[s.Rank]
		if ok && r.src.Lease == s.Lease && r.src.Node == s.Node {
			r.src.Running = s.Running
			continue
		}
		if ok {
			f.flush(r)
		}
		r = &rankStream{src: s}
		if f.filter {
			r.ef = &escapeFilter{w: &r.buf}
		}
		if sv, ok := f.saved.Ranks[strconv.Itoa(s.Rank)]; ok && sv.Lease == s.Lease && sv.Node == s.Node {
			r.pos, r.started = logPos{inode: sv.Inode, offset: sv.Offset}, true
		}
		f.ranks[s.Rank] = r
	}
}

// labelled reports whether lines carry their rank.
func (f *follower) labelled() bool { return f.label || len(f.ranks) > 1 }

// prefix is the rank in front of a line, as wide as the widest rank.
func (f *follower) prefix(rank int) string {
	if !f.labelled() {
		return ""
	}
	width := 1
	for r := range f.ranks {
		width = max(width, len(strconv.Itoa(r)))
	}
	return fmt.Sprintf("%*d: ", width, rank)
}

// pump prints what every rank's log has gained since the last call, and
// reports whether anything was printed. A read that fails is tried again
// on the next call: a node that is briefly unreachable loses nothing.
func (f *follower) pump(ctx context.Context) (bool, error) {
	any := false
	for _, rank := range f.order() {
		r := f.ranks[rank]
		got, err := f.read(ctx, r)
		if err != nil {
			if ctx.Err() != nil {
				return any, ctx.Err()
			}
			continue
		}
		any = any || got
	}
	if any {
		f.store()
	}
	return any, nil
}

func (f *follower) order() []int {
	var rs []int
	for r := range f.ranks {
		rs = append(rs, r)
	}
	slices.Sort(rs)
	return rs
}

// read prints what one rank's log gained, chunk by chunk, up to its end.
func (f *follower) read(ctx context.Context, r *rankStream) (bool, error) {
	got := false
	if !r.started {
		// From the start: the rotated part first, whole.
		r.started = true
		off := int64(0)
		for {
			ch, err := f.readChunk(ctx, r, ".1", off)
			if err != nil || len(ch.Data) == 0 {
				break
			}
			f.feed(r, ch.Data)
			got = true
			off += int64(len(ch.Data))
			if off >= ch.Size {
				break
			}
		}
	}
	for {
		ch, err := f.readChunk(ctx, r, "", r.pos.offset)
		if notFound(err) {
			return got, nil // not written yet: the session is starting
		}
		if err != nil {
			return got, err
		}
		if r.pos.inode != 0 && (ch.Inode != r.pos.inode || ch.Size < r.pos.offset) {
			// Rotated (or truncated) since the last read: the current
			// file from its start. What the old file gained after the
			// last read is in the rotated part, read here first.
			for off := r.pos.offset; ; {
				old, err := f.readChunk(ctx, r, ".1", off)
				if err != nil || old.Inode != r.pos.inode || len(old.Data) == 0 {
					break
				}
				f.feed(r, old.Data)
				got = true
				off += int64(len(old.Data))
			}
			r.pos = logPos{inode: ch.Inode}
			continue
		}
		r.pos.inode = ch.Inode
		if len(ch.Data) == 0 {
			return got, nil
		}
		f.feed(r, ch.Data)
		r.pos.offset += int64(len(ch.Data))
		got = true
		if r.pos.offset >= ch.Size {
			return got, nil
		}
	}
}

func (f *follower) readChunk(ctx context.Context, r *rankStream, part string, off int64) (api.LogChunk, error) {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return f.cl.ReadLog(cctx, api.LogReadRequest{Node: r.src.Node, Session: logName(r.src), Part: part, Offset: off, Max: 128 << 10})
}

// feed prints data's whole lines, each with its rank in front; the end
// of a line not yet finished waits for the rest.
func (f *follower) feed(r *rankStream, data []byte) {
	if !f.labelled() && len(r.partial) == 0 {
		f.write(r, data)
		return
	}
	r.partial = append(r.partial, data...)
	i := bytes.LastIndexByte(r.partial, '\n')
	if i < 0 && len(r.partial) < maxPartial {
		return
	}
	whole := r.partial
	if i >= 0 {
		whole = r.partial[:i+1]
	}
	rest := bytes.Clone(r.partial[len(whole):])
	f.write(r, whole)
	r.partial = rest
}

// flush prints the unfinished end of a rank's output, ended with a newline.
func (f *follower) flush(r *rankStream) {
	if len(r.partial) == 0 {
		return
	}
	p := append(r.partial, '\n')
	r.partial = nil
	f.write(r, p)
	f.store()
}

// flushAll flushes every rank.
func (f *follower) flushAll() {
	for _, rank := range f.order() {
		f.flush(f.ranks[rank])
	}
}

// write prints lines of one rank: filtered, each with its prefix.
func (f *follower) write(r *rankStream, p []byte) {
	if r.ef != nil {
		r.buf.Reset()
		r.ef.Write(p)
		p = r.buf.Bytes()
	}
	pre := f.prefix(r.src.Rank)
	if pre == "" {
		f.w.Write(p)
		return
	}
	var out bytes.Buffer
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		line := p
		if i >= 0 {
			line = p[:i+1]
		}
		out.WriteString(pre)
		out.Write(line)
		p = p[len(line):]
	}
	f.w.Write(out.Bytes())
}

// running reports whether a followed rank's session still runs.
func (f *follower) running() bool {
	for _, r := range f.ranks {
		if r.src.Running {
			return true
		}
	}
	return false
}

// refresh asks the agent for the run's log sources again.
func (f *follower) refresh(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	srcs, err := f.cl.LogSources(cctx, f.id)
	if err != nil {
		return err
	}
	f.update(srcs)
	return nil
}

// drainQuiet and drainMax bound the wait for a run's last output: a
// session's last bytes reach its log through tmux's pipe a moment after
// the session ended (usually within milliseconds; seconds on a loaded
// node), so the logs are read until they have been quiet for drainQuiet,
// for drainMax at most.
const (
	drainQuiet = time.Second
	drainMax   = 5 * time.Second
)

// drain prints the rest of ranks that have ended, and the unfinished ends.
func (f *follower) drain(ctx context.Context) {
	f.refresh(ctx)
	start, quiet := time.Now(), time.Now()
	for time.Since(quiet) < drainQuiet && time.Since(start) < drainMax {
		got, err := f.pump(ctx)
		if err != nil {
			break
		}
		if got {
			quiet = time.Now()
			continue
		}
		select {
		case <-ctx.Done():
		case <-time.After(followPoll): // a poll: a log has no change signal
		}
	}
	f.flushAll()
}

// followState is where the last foreground follower of a run on this
// machine stopped printing each rank: `dibs logs ID -f --resume` goes on
// from there. It is written after every print, so a follower killed with
// the SSH connection that carried it leaves it behind.
type followState struct {
	ID    string               `json:"id"`
	Ranks map[string]savedRank `json:"ranks"`
}

// savedRank is one rank's position: its lease (a requeued gang's next
// attempt starts from its beginning) and how far into which file.
type savedRank struct {
	Node   string `json:"node"`
	Lease  string `json:"lease"`
	Inode  uint64 `json:"inode"`
	Offset int64  `json:"offset"`
}

var stateName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$`)

// validStateName says whether id can name a file of saved positions.
func validStateName(id string) bool { return stateName.MatchString(id) }

// followStateFile is where the positions of run id are kept: under
// $XDG_STATE_HOME (~/.local/state by default), for the user who follows.
func followStateFile(id string) (string, error) {
	dir := os.Getenv("XDG_STATE_HOME")
	if dir == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("no home directory to keep follow positions in: %w", err)
		}
		dir = filepath.Join(home, ".local", "state")
	}
	return filepath.Join(dir, "dibs", "follow", id+".json"), nil
}

// store writes every rank's printed position; a failure is quiet (the
// output matters more than the bookmark).
func (f *follower) store() {
	if !f.save {
		return
	}
	for rank, r := range f.ranks {
		if r.pos.inode == 0 {
			continue
		}
		f.saved.Ranks[strconv.Itoa(rank)] = savedRank{Node: r.src.Node, Lease: r.src.Lease, Inode: r.pos.inode, Offset: r.pos.offset - int64(len(r.partial))}
	}
	path, err := followStateFile(f.id)
	if err != nil {
		return
	}
	b, _ := json.Marshal(f.saved)
	os.MkdirAll(filepath.Dir(path), 0o700)
	tmp := path + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		os.Rename(tmp, path)
	}
}

// resume loads where the last follower of the run stopped.
func (f *follower) resume() error {
	path, err := followStateFile(f.id)
	if err != nil {
		return err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no follow of %s to resume on this machine: --resume goes on from where dibs run --follow or dibs logs -f last stopped printing it", f.id)
	}
	if err != nil {
		return fmt.Errorf("read follow positions: %w", err)
	}
	var st followState
	if err := json.Unmarshal(b, &st); err != nil || st.ID != f.id {
		return fmt.Errorf("follow positions in %s are damaged: drop --resume (or delete the file) to print %s from its start", path, f.id)
	}
	if st.Ranks == nil {
		st.Ranks = map[string]savedRank{}
	}
	f.saved = st
	return nil
}

// ranksLine says where each rank runs, for a person.
func (f *follower) ranksLine() string {
	var parts []string
	for _, rank := range f.order() {
		r := f.ranks[rank]
		state := "ended"
		if r.src.Running {
			state = "running"
		}
		parts = append(parts, fmt.Sprintf("rank %d on %s %s", rank, safe(r.src.Node), state))
	}
	return strings.Join(parts, ", ")
}
