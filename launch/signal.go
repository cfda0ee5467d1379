package launch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Signal sends sig to the processes of the session: those of every pane (in
// every window) and all their descendants, found through /proc, children
// before parents. The agent uses it for cooperative preemption (SIGUSR1) and
// for SIGTERM followed, after a grace period, by SIGKILL.
//
// A process that has not set a handler for sig is spared where the signal
// would only do harm: a notice (any signal but SIGTERM, SIGINT, SIGHUP, SIGQUIT
// and SIGKILL) is not sent to processes it would kill, so a preemption notice
// reaches the job without killing the interactive shell or the `tee` around it;
// and a pane's own process that still has children and would die of the
// signal (a wrapper shell) is spared too, because its death hangs up the pane
// and so SIGHUPs the job before its handler can finish. SIGKILL reaches every
// process.
//
// The pane pids come from the user's tmux server, which the user controls, so a
// process is signalled only if the user could signal it themselves (its real or
// saved uid is the user's): a root agent never becomes a way to kill someone
// else's processes. Processes that exit meanwhile are skipped. Safe for
// concurrent use.
func (l *Launcher) Signal(ctx context.Context, u User, name string, sig syscall.Signal) error {
	out, err := l.run(ctx, u, "list-panes", "-s", "-t", exact(name), "-F", "#{pane_pid}")
	if err != nil {
		return fmt.Errorf("signal %v to session %s of %s: %w", sig, name, u.Name, err)
	}
	panes := make(map[int]bool)
	var roots []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			roots = append(roots, pid)
			panes[pid] = true
		}
	}
	parents, err := readParents("/proc")
	if err != nil {
		return fmt.Errorf("signal %v to session %s of %s: %w", sig, name, u.Name, err)
	}
	hasChildren := make(map[int]bool, len(parents))
	for _, ppid := range parents {
		hasChildren[ppid] = true
	}
	tree := descendants(parents, roots)
	var errs []error
	for i := len(tree) - 1; i >= 0; i-- {
		pid := tree[i]
		st, ok := readStatus("/proc", pid)
		if !ok {
			continue // exited
		}
		if u.UID != 0 && st.realUID != u.UID && st.savedUID != u.UID {
			continue
		}
		if !shouldSignal(sig, st.handles(sig), panes[pid] && hasChildren[pid]) {
			continue
		}
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			errs = append(errs, fmt.Errorf("pid %d: %w", pid, err))
		}
	}
	return wrapf(errors.Join(errs...), "signal %v to session %s of %s", sig, name, u.Name)
}

// shouldSignal applies Signal's rule for one process: handled says it catches
// or ignores sig, wrapper that it is a pane's process with children.
func shouldSignal(sig syscall.Signal, handled, wrapper bool) bool {
	switch sig {
	case syscall.SIGKILL:
		return true
	case syscall.SIGCHLD, syscall.SIGCONT, syscall.SIGURG, syscall.SIGWINCH,
		syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
		return true // harmless or meant for everyone by default
	}
	if handled {
		return true
	}
	switch sig {
	case syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT:
		return !wrapper
	}
	return false // a notice it would die of
}

// readParents maps every live pid to its parent pid, from procRoot/*/stat.
func readParents(procRoot string) (map[int]int, error) {
	entries, err := os.ReadDir(procRoot)
	if err != nil {
		return nil, fmt.Errorf("read process table: %w", err)
	}
	parents := make(map[int]int, len(entries))
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join(procRoot, e.Name(), "stat"))
		if err != nil {
			continue // exited while we looked
		}
		if ppid, ok := parseStatPPID(data); ok {
			parents[pid] = ppid
		}
	}
	return parents, nil
}

// parseStatPPID reads the ppid from /proc/PID/stat. The command name may
// contain spaces and ')', so fields are counted from the last ')'.
func parseStatPPID(stat []byte) (int, bool) {
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, false
	}
	f := strings.Fields(string(stat[i+1:])) // state, ppid, ...
	if len(f) < 2 {
		return 0, false
	}
	ppid, err := strconv.Atoi(f[1])
	return ppid, err == nil
}

// descendants returns roots that are alive and all their descendants, parents
// before children, each once.
func descendants(parents map[int]int, roots []int) []int {
	children := make(map[int][]int)
	for pid, ppid := range parents {
		children[ppid] = append(children[ppid], pid)
	}
	seen := make(map[int]bool)
	var order []int
	queue := make([]int, 0, len(roots))
	for _, r := range roots {
		if _, alive := parents[r]; alive {
			queue = append(queue, r)
		}
	}
	for len(queue) > 0 {
		pid := queue[0]
		queue = queue[1:]
		if seen[pid] {
			continue
		}
		seen[pid] = true
		order = append(order, pid)
		queue = append(queue, children[pid]...)
	}
	return order
}

// procStatus is what Signal needs from /proc/PID/status.
type procStatus struct {
	realUID, savedUID int
	caught, ignored   uint64 // signal masks, bit n-1 for signal n
}

// handles reports whether the process has a handler for sig or ignores it.
func (st procStatus) handles(sig syscall.Signal) bool {
	if sig < 1 || sig > 64 {
		return false
	}
	bit := uint64(1) << (sig - 1)
	return (st.caught|st.ignored)&bit != 0
}

func readStatus(procRoot string, pid int) (procStatus, bool) {
	data, err := os.ReadFile(filepath.Join(procRoot, strconv.Itoa(pid), "status"))
	if err != nil {
		return procStatus{}, false
	}
	return parseStatus(data)
}

// parseStatus reads the uids and signal masks from /proc/PID/status.
func parseStatus(status []byte) (procStatus, bool) {
	var st procStatus
	var haveUID, haveCgt, haveIgn bool
	for line := range strings.Lines(string(status)) {
		key, rest, found := strings.Cut(line, ":")
		if !found {
			continue
		}
		f := strings.Fields(rest)
		switch key {
		case "Uid": // real, effective, saved, filesystem
			if len(f) < 3 {
				return st, false
			}
			r, err1 := strconv.Atoi(f[0])
			s, err2 := strconv.Atoi(f[2])
			st.realUID, st.savedUID, haveUID = r, s, err1 == nil && err2 == nil
		case "SigCgt", "SigIgn":
			if len(f) != 1 {
				return st, false
			}
			m, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				return st, false
			}
			if key == "SigCgt" {
				st.caught, haveCgt = m, true
			} else {
				st.ignored, haveIgn = m, true
			}
		}
	}
	return st, haveUID && haveCgt && haveIgn
}
