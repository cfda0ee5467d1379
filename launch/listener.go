package launch

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Listener is who listens on a service's port: whether a process of the
// session's own tree, running as the session's user, holds the listening
// socket. Another user who binds the port while the service is down (to
// take its traffic) fails it, as does a listener of the same user outside
// the session.
type Listener struct {
	// PID is the session's process that holds the listening socket; 0
	// when none of them does.
	PID int
	// Root is the session's first process (its pane's), 0 when the
	// session has none.
	Root int
	// Clients are the remote ports of the TCP connections to port in the
	// session's network namespace (open, or closed within the kernel's
	// TIME_WAIT): what the supervisor counts as requests, leaving out its
	// own checks' (issue 33's idle flag).
	Clients []int
}

// ListenerOf finds which of session name's processes (every pane and its
// descendants, those running as u only) listens on TCP port, over IPv4 or
// IPv6, by matching the socket inodes of /proc/net/tcp{,6} (read in the
// session's own network namespace) with the processes' file descriptors.
// Safe for concurrent use; bounded by ctx through the tmux call.
func (l *Launcher) ListenerOf(ctx context.Context, u User, name string, port int) (Listener, error) {
	out, err := l.run(ctx, u, "list-panes", "-s", "-t", exact(name), "-F", "#{pane_pid}")
	if err != nil {
		return Listener{}, fmt.Errorf("listener of session %s of %s: %w", name, u.Name, err)
	}
	var roots []int
	for _, f := range strings.Fields(string(out)) {
		if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
			roots = append(roots, pid)
		}
	}
	parents, err := readParents("/proc")
	if err != nil {
		return Listener{}, fmt.Errorf("listener of session %s of %s: %w", name, u.Name, err)
	}
	var own []int
	for _, pid := range descendants(parents, roots) {
		if st, ok := readStatus("/proc", pid); ok && st.realUID == u.UID {
			own = append(own, pid)
		}
	}
	var res Listener
	if len(own) == 0 {
		return res, nil
	}
	res.Root = own[0]
	res.PID, res.Clients = listenerAmong("/proc", own, port)
	return res, nil
}

// listenerAmong is the first of pids that holds a socket listening on
// port, 0 when none does, and the remote ports of the connections to
// port: one read of the tables for both (each read walks the kernel's
// whole connection table).
func listenerAmong(procRoot string, pids []int, port int) (pid int, clients []int) {
	dir := filepath.Join(procRoot, strconv.Itoa(pids[0]), "net")
	inodes := map[string]bool{}
	for _, f := range []string{"tcp", "tcp6"} {
		data, err := os.ReadFile(filepath.Join(dir, f))
		if err == nil {
			for _, ino := range ListeningInodes(string(data), port) {
				inodes[ino] = true
			}
			if port != 0 {
				clients = append(clients, ClientPorts(string(data), port)...)
			}
		}
	}
	if len(inodes) == 0 {
		return 0, clients
	}
	for _, pid := range pids {
		fds := filepath.Join(procRoot, strconv.Itoa(pid), "fd")
		entries, err := os.ReadDir(fds)
		if err != nil {
			continue // exited, or not ours to read
		}
		for _, e := range entries {
			target, err := os.Readlink(filepath.Join(fds, e.Name()))
			if err != nil {
				continue
			}
			if ino, ok := strings.CutPrefix(target, "socket:["); ok && inodes[strings.TrimSuffix(ino, "]")] {
				return pid, clients
			}
		}
	}
	return 0, clients
}

// ListeningInodes reads a /proc/net/tcp (or tcp6) table and returns the
// inodes of the sockets listening (state 0A) on port, on any address.
func ListeningInodes(table string, port int) []string {
	var out []string
	for i, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 10 || f[3] != "0A" {
			continue
		}
		_, hexPort, ok := strings.Cut(f[1], ":")
		if !ok {
			continue
		}
		p, err := strconv.ParseUint(hexPort, 16, 16)
		if err != nil || int(p) != port {
			continue
		}
		out = append(out, f[9])
	}
	return out
}

// ClientPorts reads a /proc/net/tcp (or tcp6) table and returns the
// remote ports of the connections whose local port is port: every socket
// but the listening one (state 0A), so a connection made and closed since
// the last look is still seen in its TIME_WAIT.
func ClientPorts(table string, port int) []int {
	var out []int
	for i, line := range strings.Split(table, "\n") {
		f := strings.Fields(line)
		if i == 0 || len(f) < 4 || f[3] == "0A" {
			continue
		}
		_, local, ok1 := strings.Cut(f[1], ":")
		_, remote, ok2 := strings.Cut(f[2], ":")
		if !ok1 || !ok2 {
			continue
		}
		lp, err1 := strconv.ParseUint(local, 16, 16)
		rp, err2 := strconv.ParseUint(remote, 16, 16)
		if err1 != nil || err2 != nil || int(lp) != port {
			continue
		}
		out = append(out, int(rp))
	}
	return out
}
