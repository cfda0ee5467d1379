package node

import (
	"strconv"
	"time"
)

// Fence is how a service's replica stops itself (issue 33): the agent
// touches File every second while it runs and is in touch with the
// cluster (or is alone in it by design), and a watchdog in the replica's
// session stops the session's process group once File is older than
// After (the grace, queue.lost_after). The replica needs nothing of the
// agent to do it: tmux outlives a killed agent, and a partition hides a
// replica from the node that places it again, so the old copy must stop
// on its own side. An agent restarted within the grace touches File again
// before it is stale: the same process keeps serving.
type Fence struct {
	// File is the heartbeat; it and every directory above it must be
	// readable (searchable) by every user, as the socket's directory is.
	// Empty fences nothing.
	File string
	// After is the grace.
	After time.Duration
}

// fenceScript is the watchdog: /bin/sh -c fenceScript dibs-fence FILE
// SECONDS COMMAND... It starts the watchdog only when FILE can be read
// (an agent that keeps no heartbeat never fences), then becomes the
// command itself (exec: the pane's process is the service's, its PID the
// one the supervisor records). The watchdog runs in the background of the
// same process group, checks every second that the command still runs,
// and when FILE is more than SECONDS old sends the group SIGTERM, then
// SIGKILL 5 s later. One argument is a shell line, run with $SHELL -c as
// launch.Spec.Command says.
const fenceScript = `hb=$1 grace=$2; shift 2
pg=$(cut -d' ' -f5 /proc/$$/stat 2>/dev/null)
if [ -n "$pg" ] && stat -c %Y "$hb" >/dev/null 2>&1; then
  ( trap '' TERM HUP INT
    while kill -0 $$ 2>/dev/null; do
      sleep 1
      t=$(stat -c %Y "$hb" 2>/dev/null) || t=0
      if [ $(( $(date +%s) - t )) -gt "$grace" ]; then
        echo "dibs: this node's agent has been gone, or cut off from the cluster, for more than ${grace}s: stopping this replica (dibs places it on another node)" >&2
        kill -TERM -"$pg" 2>/dev/null; sleep 5; kill -KILL -"$pg" 2>/dev/null; exit 0
      fi
    done ) &
fi
if [ $# -eq 1 ]; then exec "${SHELL:-/bin/sh}" -c "$1"; fi
exec "$@"`

// Wrap is cmd run under the watchdog; cmd as is when f fences nothing or
// cmd is empty (a login shell is no service).
func (f Fence) Wrap(cmd []string) []string {
	if f.File == "" || f.After <= 0 || len(cmd) == 0 {
		return cmd
	}
	// The file's time and `date` are whole seconds, and the agent touches
	// it every second: a difference above ceil(After)+1 s means the agent
	// has been silent for more than After, never less, so an agent
	// restarted within the grace keeps its replicas.
	secs := int((f.After+time.Second-1)/time.Second) + 1
	out := []string{"/bin/sh", "-c", fenceScript, "dibs-fence", f.File, strconv.Itoa(secs)}
	return append(out, cmd...)
}
