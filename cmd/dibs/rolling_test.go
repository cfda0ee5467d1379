package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/prereq"
)

// firstRelease is v0.1.0, the first release: the commit, not the tag, since
// tags may not travel with a clone.
const firstRelease = "e4e3039"

// buildRelease builds the dibs binary of an older commit from this clone's
// history (git archive into a temporary directory, go build there without
// cgo), or ends the test (prereq.Missing: a skip, a failure under CI, whose
// clone has the history) when the commit is not in the clone.
func buildRelease(t *testing.T, commit string) string {
	t.Helper()
	_, bin := buildReleaseTree(t, commit, "")
	return bin
}

// buildReleaseTree is buildRelease with the commit's source tree (its
// packaging files, for a test that packages the release) and ldflags for
// the build (a release's version stamp), both returned: the tree, then the
// binary.
func buildReleaseTree(t *testing.T, commit, ldflags string) (src, bin string) {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		prereq.Missing(t, "no git: cannot build the first release from history")
	}
	top, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		prereq.Missing(t, "not in a git clone (%v): cannot build release %s from history", err, commit)
	}
	repo := strings.TrimSpace(string(top))
	if err := exec.Command("git", "-C", repo, "cat-file", "-e", commit+"^{commit}").Run(); err != nil {
		prereq.Missing(t, "commit %s (v0.1.0) is not in this clone (a shallow clone?): fetch the history to run the rolling-upgrade test", commit)
	}
	src = t.TempDir()
	archive := exec.Command("git", "-C", repo, "archive", "--format=tar", commit)
	untar := exec.Command("tar", "-x", "-C", src)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	untar.Stdin = pipe
	// One buffer each: exec copies each process's stderr in a goroutine of
	// its own, and a shared bytes.Buffer would be written by both at once.
	var archiveErr, untarErr bytes.Buffer
	archive.Stderr, untar.Stderr = &archiveErr, &untarErr
	if err := untar.Start(); err != nil {
		t.Fatal(err)
	}
	if err := archive.Run(); err != nil {
		t.Fatalf("git archive %s: %v: %s", commit, err, archiveErr.String())
	}
	if err := untar.Wait(); err != nil {
		t.Fatalf("untar %s: %v: %s", commit, err, untarErr.String())
	}
	bin = filepath.Join(t.TempDir(), "dibs-"+commit)
	// -trimpath keeps the build cache's entries independent of the
	// temporary directory, so a second run compiles only what changed.
	build := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", bin, "./cmd/dibs")
	build.Dir = src
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		if missingModules(string(out)) {
			prereq.Missing(t, "cannot build %s here: its modules are not in the module cache and cannot be fetched:\n%s", commit, out)
		}
		t.Fatalf("build %s: %v\n%s", commit, err, out)
	}
	os.Chmod(filepath.Dir(bin), 0o755)
	return src, bin
}

// mixedNode is one agent process of a cluster whose nodes may run
// different dibs binaries; bin is the one it runs now.
type mixedNode struct {
	name, socket, data string
	port               int
	mu                 sync.Mutex
	bin                string
	cmd                *exec.Cmd
	log                *syncBuffer
}

func (n *mixedNode) binary() string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.bin
}

// mixedCluster is agent processes on loopback, each joining all the others.
type mixedCluster struct {
	nodes []*mixedNode
	key   string
	conf  string
}

func startMixedCluster(t *testing.T, bins []string, config string) *mixedCluster {
	t.Helper()
	dir := agenttest.PublicDir(t)
	c := &mixedCluster{key: filepath.Join(dir, "cluster.key"), conf: filepath.Join(dir, "dibs.toml")}
	if _, e, code := dibs(t, filepath.Join(dir, "none.sock"), nil, "keygen", c.key); code != 0 {
		t.Fatal(e)
	}
	os.WriteFile(c.conf, []byte(config), 0o644)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	for i, bin := range bins {
		name := fmt.Sprintf("node%02d", i+1)
		n := &mixedNode{name: name, socket: filepath.Join(dir, name, "dibs.sock"), data: filepath.Join(dir, name, "data"), port: agenttest.FreePort(t), bin: bin}
		os.MkdirAll(filepath.Dir(n.socket), 0o755)
		c.nodes = append(c.nodes, n)
	}
	for _, n := range c.nodes {
		c.start(t, n)
	}
	c.waitWhole(t, 30*time.Second)
	return c
}

// start runs n's agent with its current binary.
func (c *mixedCluster) start(t *testing.T, n *mixedNode) {
	t.Helper()
	var join []string
	for _, o := range c.nodes {
		if o != n {
			join = append(join, fmt.Sprintf("127.0.0.1:%d", o.port))
		}
	}
	args := []string{"agent", "--config", c.conf, "--node-name", n.name, "--sim", "4xL40S", "--data-dir", n.data,
		"--socket", n.socket, "--bind", fmt.Sprintf("127.0.0.1:%d", n.port), "--cluster-key-file", c.key,
		"--probe-interval", "200ms", "--join", strings.Join(join, ",")}
	n.mu.Lock()
	n.log = &syncBuffer{}
	n.cmd = exec.Command(n.bin, args...)
	n.cmd.Stdout, n.cmd.Stderr = n.log, n.log
	n.cmd.Env = os.Environ()
	err := n.cmd.Start()
	cmd, log, bin := n.cmd, n.log, n.bin
	n.mu.Unlock()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		if t.Failed() {
			t.Logf("%s (%s) log:\n%s", n.name, filepath.Base(bin), log)
		}
	})
}

// upgrade stops n's agent as systemctl restart does (SIGTERM) and starts
// bin on the same data dir and address.
func (c *mixedCluster) upgrade(t *testing.T, n *mixedNode, bin string) {
	t.Helper()
	n.mu.Lock()
	cmd := n.cmd
	n.mu.Unlock()
	cmd.Process.Signal(syscall.SIGTERM)
	cmd.Wait()
	n.mu.Lock()
	n.bin = bin
	n.mu.Unlock()
	c.start(t, n)
}

// waitWhole waits until `dibs status` on every node lists every node
// alive, and its board shows every node's GPUs: one cluster, not two.
func (c *mixedCluster) waitWhole(t *testing.T, within time.Duration) {
	t.Helper()
	agenttest.Eventually(t, within, "dibs status and dibs ls on every node to show every node alive", func() bool {
		for _, n := range c.nodes {
			out, _, code := dibsWith(t, n.binary(), n.socket, "status", "--json")
			var st api.Status
			if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
				return false
			}
			alive := 0
			for _, m := range st.Members {
				if m.State == api.NodeAlive {
					alive++
				}
			}
			if alive != len(c.nodes) {
				return false
			}
			out, _, code = dibsWith(t, n.binary(), n.socket, "ls", "--json")
			var b api.Board
			if code != 0 || json.Unmarshal([]byte(out), &b) != nil {
				return false
			}
			shown := 0
			for _, bn := range b.Nodes {
				if bn.State == api.NodeAlive && len(bn.GPUs) > 0 {
					shown++
				}
			}
			if shown != len(c.nodes) {
				return false
			}
		}
		return true
	})
}

// dibsWith runs the CLI binary bin against socket.
func dibsWith(t *testing.T, bin, socket string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"--socket", socket}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Dir = "/"
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Errorf("run %s %v: %v", bin, args, err)
		code = -1
	}
	return o.String(), e.String(), code
}

// versionWords are what a refusal for a version reason says, in any
// release: the protocol or wire numbers, a decoder's complaint about a
// field or request it does not know.
var versionWords = []string{"protocol", "version", "unknown field", "unknown request", "malformed", "wire"}

// TestRollingUpgradeFromFirstRelease: three agents of the first release
// (v0.1.0, built from git history) are upgraded to this build one by one
// (SIGTERM, then the new binary on the same data), while clients on every
// node claim and release GPUs on every node through whichever binary the
// node runs. No claim is refused for a version reason, `dibs status` and
// `dibs ls` on every node show every node after each step (never a split
// cluster), claims cross the versions both ways, and a queued run submitted
// at an old node and at a new one runs while the cluster is mixed.
func TestRollingUpgradeFromFirstRelease(t *testing.T) {
	agenttest.RequireTmux(t)
	old := buildRelease(t, firstRelease)
	c := startMixedCluster(t, []string{old, old, old}, "")

	type outcome struct{ ok, refused, unreachable int }
	var (
		mu       sync.Mutex
		crossed  = map[string]int{} // "old->new" and the like: granted claims
		failures []string
		others   []string // a few refusals for other reasons, for the log
		counts   outcome
		stop     = make(chan struct{})
		wg       sync.WaitGroup
	)
	kind := func(bin string) string {
		if bin == old {
			return "v0.1.0"
		}
		return "this"
	}
	for w, n := range c.nodes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(w), 19))
			for {
				select {
				case <-stop:
					return
				default:
				}
				target := c.nodes[rng.IntN(len(c.nodes))]
				from, to := n.binary(), target.binary()
				out, errOut, code := dibsWith(t, from, n.socket, "claim", "-g", "1", "--node", target.name, "--for", "10m", "--json")
				mu.Lock()
				switch {
				case code == 0:
					counts.ok++
					crossed[kind(from)+" -> "+kind(to)]++
				case containsAny(errOut, versionWords):
					failures = append(failures, fmt.Sprintf("claim at %s (%s) on %s (%s): %s", n.name, kind(from), target.name, kind(to), strings.TrimSpace(errOut)))
				case strings.Contains(errOut, "agent") && (strings.Contains(errOut, "not running") || strings.Contains(errOut, "socket")):
					counts.unreachable++ // its own agent is restarting
				default:
					counts.refused++ // a node restarting, no free GPU: not a version reason
					if len(others) < 5 {
						others = append(others, strings.TrimSpace(errOut))
					}
				}
				mu.Unlock()
				if code != 0 {
					time.Sleep(50 * time.Millisecond) // load pacing: a refused client tries again soon, not in a spin on shared cores
					continue
				}
				var r api.ClaimResponse
				json.Unmarshal([]byte(out), &r)
				time.Sleep(time.Duration(rng.IntN(200)) * time.Millisecond) // load window: the lease is held a random real while before its release
				// The release goes to the node that granted it, through
				// whatever binary this node runs now.
				poll.WaitEvery(250*time.Millisecond, 10*time.Second, func() bool {
					_, errOut, code := dibsWith(t, n.binary(), n.socket, "release", r.ID)
					if code == 0 {
						return true
					}
					if containsAny(errOut, versionWords) {
						mu.Lock()
						failures = append(failures, fmt.Sprintf("release of %s at %s: %s", r.ID, n.name, strings.TrimSpace(errOut)))
						mu.Unlock()
						return true
					}
					return false
				})
			}
		}()
	}

	queued := func(at *mixedNode) {
		t.Helper()
		out, errOut, code := dibsWith(t, at.binary(), at.socket, "run", "--queue", "-g", "1", "--for", "10m", "--json", "--", "sleep", "300")
		if code != 0 {
			t.Fatalf("queue a run at %s (%s): %s", at.name, kind(at.binary()), errOut)
		}
		var sub api.Submitted
		json.Unmarshal([]byte(out), &sub)
		if sub.ID == "" {
			t.Fatalf("queue a run at %s: no entry id in %s", at.name, out)
		}
		// It runs (its lease is on some board), and every node's board
		// shows that lease.
		var lease string
		agenttest.Eventually(t, 20*time.Second, "the run queued at "+at.name+" to run, shown on every board", func() bool {
			lease = ""
			for _, n := range c.nodes {
				out, _, code := dibsWith(t, n.binary(), n.socket, "ls", "--json")
				var b api.Board
				if code != 0 || json.Unmarshal([]byte(out), &b) != nil {
					return false
				}
				found := ""
				for _, bn := range b.Nodes {
					for _, g := range bn.GPUs {
						if l := g.Lease; l != nil && strings.HasPrefix(l.Entry, sub.ID+"#") {
							found = l.ID
						}
					}
				}
				if found == "" || (lease != "" && found != lease) {
					return false
				}
				lease = found
			}
			return true
		})
		if _, errOut, code := dibsWith(t, at.binary(), at.socket, "release", lease); code != 0 {
			t.Errorf("release the queued run's lease %s at %s: %s", lease, at.name, errOut)
		}
	}

	// grants waits for the clients to be granted six claims more: a phase
	// of the upgrade under their load, counted in claims, not in seconds.
	grants := func(what string) {
		t.Helper()
		mu.Lock()
		from := counts.ok
		mu.Unlock()
		agenttest.Eventually(t, time.Minute, "six claims granted "+what, func() bool {
			mu.Lock()
			defer mu.Unlock()
			return counts.ok >= from+6
		})
	}
	grants("among v0.1.0 agents alone")
	for i, n := range c.nodes {
		c.upgrade(t, n, dibsBin)
		c.waitWhole(t, 30*time.Second)
		// The upgraded node's `dibs status` names the members still old.
		out, _, _ := dibsWith(t, dibsBin, n.socket, "status")
		if mixed := strings.Contains(out, "mixed versions: "); mixed != (i < len(c.nodes)-1) {
			t.Errorf("after upgrading %d of %d nodes, %s's status:\n%s", i+1, len(c.nodes), n.name, out)
		}
		if i < len(c.nodes)-1 { // mixed: a queued run from an old node and from a new one
			queued(c.nodes[len(c.nodes)-1])
			queued(n)
		}
		grants(fmt.Sprintf("with %d of %d nodes upgraded", i+1, len(c.nodes)))
	}
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	t.Logf("claims granted %d, refused for other reasons %d, own agent restarting %d; granted by version %v", counts.ok, counts.refused, counts.unreachable, crossed)
	for _, o := range others {
		t.Logf("refused for another reason: %s", o)
	}
	for _, f := range failures {
		t.Errorf("refused for a version reason: %s", f)
	}
	for _, want := range []string{"v0.1.0 -> this", "this -> v0.1.0", "this -> this", "v0.1.0 -> v0.1.0"} {
		if crossed[want] == 0 {
			t.Errorf("no claim made %s was granted", want)
		}
	}
}

// rollingGang is a 2-node gang of a counting loop, submitted at origin,
// that a test follows while the cluster's agents are swapped one by one:
// its ranks (lease, session, process) as they were once it ran, and the
// directory each rank counts into.
type rollingGang struct {
	c      *mixedCluster
	origin *mixedNode
	id     string
	ranks  map[string]gangRank // by lease id
	dir    string
}

// startRollingGang fills busy's four GPUs (a claim made there), so the gang
// runs on the other two nodes, and submits at origin `dibs run --nodes 2`
// of a loop that appends 1, 2, 3… to dir/rank-NODE_RANK ten times a
// second, through the binary origin runs.
func startRollingGang(t *testing.T, c *mixedCluster, origin, busy *mixedNode) *rollingGang {
	t.Helper()
	if _, errOut, code := dibsWith(t, busy.binary(), busy.socket, "claim", "-g", "4", "--node", busy.name, "--for", "1h", "--json"); code != 0 {
		t.Fatalf("fill %s: %s", busy.name, errOut)
	}
	g := &rollingGang{c: c, origin: origin, dir: t.TempDir()}
	loop := fmt.Sprintf(`i=0; while :; do i=$((i+1)); echo $i >> %s/rank-$NODE_RANK; sleep 0.1; done`, g.dir)
	out, errOut, code := dibsWith(t, origin.binary(), origin.socket, "run", "--nodes", "2", "--gpus-per-node", "1", "--for", "1h", "--json", "--", "sh", "-c", loop)
	if code != 0 {
		t.Fatalf("dibs run --nodes 2 at %s: %s", origin.name, errOut)
	}
	var sub api.Submitted
	if json.Unmarshal([]byte(out), &sub); sub.ID == "" {
		t.Fatalf("dibs run --nodes 2 at %s: no entry id in %q", origin.name, out)
	}
	g.id = sub.ID
	agenttest.Eventually(t, 45*time.Second, "both ranks of "+g.id+" to run and count", func() bool {
		g.ranks = g.ranksOn(t, origin)
		if len(g.ranks) != 2 {
			return false
		}
		for _, r := range g.ranks {
			if r.pid == 0 || r.node == busy.name {
				return false
			}
		}
		n0, _ := g.counted(0)
		n1, _ := g.counted(1)
		return n0 > 0 && n1 > 0
	})
	return g
}

// ranksOn is the gang's committed ranks as n's board shows them (through
// the binary n runs), each with its session's process; nil when n does not
// answer.
func (g *rollingGang) ranksOn(t *testing.T, n *mixedNode) map[string]gangRank {
	t.Helper()
	out, _, code := dibsWith(t, n.binary(), n.socket, "ls", "--json")
	var b api.Board
	if code != 0 || json.Unmarshal([]byte(out), &b) != nil {
		return nil
	}
	panes := panePIDs()
	ranks := map[string]gangRank{}
	for _, bn := range b.Nodes {
		for _, gpu := range bn.GPUs {
			if l := gpu.Lease; l != nil && strings.HasPrefix(l.Entry, g.id+"#") && l.ReservedUntil.IsZero() {
				ranks[l.ID] = gangRank{node: bn.Name, lease: l.ID, session: l.Session, pid: panes[l.Session]}
			}
		}
	}
	return ranks
}

// counted is how far rank's loop has counted, or why its output is not
// one run's: a line that is not the next number (the loop started again,
// or two wrote at once).
func (g *rollingGang) counted(rank int) (int, string) {
	b, err := os.ReadFile(filepath.Join(g.dir, fmt.Sprintf("rank-%d", rank)))
	if err != nil {
		return 0, ""
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	for i, l := range lines {
		if l != strconv.Itoa(i+1) {
			return i, fmt.Sprintf("rank %d's output has %q where %d was next: its run did not go on uninterrupted", rank, l, i+1)
		}
	}
	return len(lines), ""
}

// running reports whether the origin's `dibs queue` shows the gang
// running; answered is false when its agent did not answer.
func (g *rollingGang) running(t *testing.T) (answered, running bool) {
	t.Helper()
	out, _, code := dibsWith(t, g.origin.binary(), g.origin.socket, "queue", "--json")
	var q api.Queue
	if code != 0 || json.Unmarshal([]byte(out), &q) != nil {
		return false, false
	}
	for _, e := range q.Entries {
		if e.ID == g.id {
			return true, e.Running
		}
	}
	return true, false
}

// watch checks, until its stop is called, what must hold while an
// agent is swapped: every agent that answers lists the rank leases of its
// own node, the origin (when it answers) shows the gang running, and every
// rank's process lives.
func (g *rollingGang) watch(t *testing.T, what string) *breachWatch {
	t.Helper()
	breach := func() string {
		for _, r := range g.ranks {
			if err := syscall.Kill(r.pid, 0); err != nil {
				return fmt.Sprintf("rank lease %s's process %d on %s ended", r.lease, r.pid, r.node)
			}
		}
		if answered, running := g.running(t); answered && !running {
			return fmt.Sprintf("%s's `dibs queue` shows %s not running", g.origin.name, g.id)
		}
		for _, n := range g.c.nodes {
			now := g.ranksOn(t, n)
			if now == nil {
				continue // its agent is being swapped
			}
			for id, r := range g.ranks {
				if r.node == n.name && now[id].lease != id {
					return fmt.Sprintf("%s's own board no longer holds its rank lease %s", n.name, id)
				}
			}
		}
		return ""
	}
	return watchBreach(what, 100*time.Millisecond, breach)
}

// swap replaces n's agent with bin (SIGTERM, then bin on the same data, as
// an upgrade does), waits until the cluster is whole again and the gang's
// origin has judged it a few times, and fails the test unless the gang
// held throughout: the same leases and processes on every board, its
// output going on.
func (g *rollingGang) swap(t *testing.T, n *mixedNode, bin, what string) {
	t.Helper()
	before := map[int]int{}
	for rank := range 2 {
		before[rank], _ = g.counted(rank)
	}
	watch := g.watch(t, what)
	g.c.upgrade(t, n, bin)
	g.c.waitWhole(t, 45*time.Second)
	// An absence: the origin judges its running gangs every 2 s (the
	// scheduler's tick) and at once on a membership change; give it
	// two passes and more to give the gang up, as the old code did.
	watch.hold(5 * time.Second)
	if b := watch.stop(); b != "" {
		t.Fatal(b)
	}
	for _, on := range g.c.nodes {
		if now := g.ranksOn(t, on); len(now) != len(g.ranks) {
			t.Fatalf("%s: %s's board shows the gang's ranks as %+v, want %+v", what, on.name, now, g.ranks)
		} else {
			for id, r := range g.ranks {
				if now[id] != r {
					t.Fatalf("%s: %s's board shows rank lease %s as %+v, want %+v", what, on.name, id, now[id], r)
				}
			}
		}
	}
	for rank := range 2 {
		n, why := g.counted(rank)
		if why != "" {
			t.Fatalf("%s: %s", what, why)
		}
		if n <= before[rank] {
			t.Fatalf("%s: rank %d counted to %d before and %d after: its run stalled", what, rank, before[rank], n)
		}
	}
	t.Logf("%s: the gang held (%s)", what, g.id)
}

// TestRollingUpgradeFromFirstReleaseKeepsAGang: three agents of v0.1.0
// (built from git history) run a 2-node gang, submitted at node01, on
// node01 and node02 (node03's GPUs are held). They are upgraded one by
// one in the documented order (docs/operations.md, "Upgrading": the node
// where the running gangs were submitted first, then the others): the same
// rank leases and processes before and after every step and on every
// board, both leases held by their own nodes throughout, the origin showing
// the gang running whenever it answers, and each rank's output counting on
// with no restart. v0.1.0 sent a leave notice on every stop, and the
// upgraded origin took node02's for good and ended the gang.
func TestRollingUpgradeFromFirstReleaseKeepsAGang(t *testing.T) {
	agenttest.RequireTmux(t)
	old := buildRelease(t, firstRelease)
	c := startMixedCluster(t, []string{old, old, old}, "[queue]\nlost_after = \"2m\"\n")
	node01, node02, node03 := c.nodes[0], c.nodes[1], c.nodes[2]
	g := startRollingGang(t, c, node01, node03)
	g.swap(t, node01, dibsBin, "node01 (the gang's origin, running a rank) upgraded")
	g.swap(t, node02, dibsBin, "node02 (the other rank's node) upgraded")
	g.swap(t, node03, dibsBin, "node03 (no rank) upgraded")
}

// TestGangKeepsItsRanksWhateverTheOrderFromThisRelease: from this release
// on an agent's stop (SIGTERM: a restart, an upgrade) is not a leave, so a
// cluster of this release is rolled in any order — here the order the
// first hop must avoid: each rank's node before the gang's origin — and a
// running gang keeps its ranks, leases and output throughout.
func TestGangKeepsItsRanksWhateverTheOrderFromThisRelease(t *testing.T) {
	agenttest.RequireTmux(t)
	c := startMixedCluster(t, []string{dibsBin, dibsBin, dibsBin}, "[queue]\nlost_after = \"2m\"\n")
	node01, node02, node03 := c.nodes[0], c.nodes[1], c.nodes[2]
	g := startRollingGang(t, c, node01, node01)
	g.swap(t, node02, dibsBin, "node02 (a rank's node) restarted")
	g.swap(t, node03, dibsBin, "node03 (the other rank's node) restarted")
	g.swap(t, node01, dibsBin, "node01 (the gang's origin) restarted")
}

// missingModules says a build failed for want of modules it could not
// fetch (an offline machine whose cache lacks an old release's), not for
// anything in the code.
func missingModules(out string) bool {
	return containsAny(out, []string{"module lookup disabled", "missing go.sum entry", "dial tcp", "no required module provides"})
}

func containsAny(s string, words []string) bool {
	s = strings.ToLower(s)
	for _, w := range words {
		if strings.Contains(s, w) {
			return true
		}
	}
	return false
}

// breachWatch looks for a breach every interval until stop is called.
// The rolling and install tests watch a gang through each upgrade with it.
type breachWatch struct {
	done, result chan string
	breached     atomic.Bool
}

// watchBreach starts watching: breach returns what it found broken, or "";
// what prefixes the first breach seen.
func watchBreach(what string, every time.Duration, breach func() string) *breachWatch {
	w := &breachWatch{done: make(chan string), result: make(chan string, 1)}
	go func() {
		for {
			if b := breach(); b != "" {
				w.breached.Store(true)
				w.result <- what + ": " + b
				return
			}
			select {
			case <-w.done:
				w.result <- ""
				return
			case <-time.After(every):
			}
		}
	}()
	return w
}

// hold is an absence window: it waits out during while the watch goes on,
// and returns early once a breach is seen (stop then names it).
func (w *breachWatch) hold(during time.Duration) {
	poll.Wait(during, w.breached.Load)
}

// stop ends the watch and returns the first breach seen, or "".
func (w *breachWatch) stop() string {
	close(w.done)
	return <-w.result
}
