package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/prereq"
)

// The install test follows docs/operations.md on three fresh "nodes" and
// ends with `dibs ls` on one of them showing all three.
//
// A node is a network namespace (from newNetLab: its own address on a
// bridge) plus a mount and a UTS namespace: /etc, /usr and /var are
// overlays of this machine's (writes stay in the node), /run and /tmp are
// empty, and the host name is the node's. So each node has its own
// /etc/dibs, /var/lib/dibs, /run/dibs, dpkg database and binary, and the
// package installs into each as into a new machine. Each node gets a fake
// nvidia-smi that reports two L40S GPUs (its "hardware"); the agent finds
// it as it would the real one, so the config is exactly the guide's.
// There is no systemd: the agent is started with the installed unit's
// ExecStart line, after making the directories the unit asks systemd for.

// installDebEnv names the .deb to install; .ci/run sets it after building
// the snapshot release.
const installDebEnv = "DIBS_DEB"

// guideNode is one node of the install test.
type guideNode struct {
	t      *testing.T
	name   string
	holder *exec.Cmd // keeps the node's namespaces; commands enter them
	agent  *exec.Cmd // the agent startUnit started, while it runs
}

// nodePath is the PATH systemd gives services, and a root shell has.
const nodePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// bootNode makes a node in network namespace netns.
func bootNode(t *testing.T, netns, name string, gpuSerial int) *guideNode {
	t.Helper()
	dir := t.TempDir()
	fakeSMI := fmt.Sprintf(`#!/bin/sh
# a node with two L40S GPUs, for the install test
case "$1" in
--query-gpu=*)
	echo "0, GPU-00000000-0000-4000-8000-0000000%03d00, 00000000:01:00.0, NVIDIA L40S, 46068, 0, 0, 30, 35.00, 350.00, [N/A], 550.54.14"
	echo "1, GPU-00000000-0000-4000-8000-0000000%03d01, 00000000:02:00.0, NVIDIA L40S, 46068, 0, 0, 31, 36.00, 350.00, [N/A], 550.54.14" ;;
--query-compute-apps=*) ;;
*) echo "fake nvidia-smi: unexpected $*" >&2; exit 2 ;;
esac
`, gpuSerial, gpuSerial)
	if err := os.WriteFile(filepath.Join(dir, "nvidia-smi"), []byte(fakeSMI), 0o755); err != nil {
		t.Fatal(err)
	}
	// The overlays' upper layers live on a tmpfs of the node's own, so
	// nothing a node writes reaches this machine's disk or the others.
	setup := fmt.Sprintf(`set -e
d=%[1]s
mkdir -p $d/layers
mount -t tmpfs -o mode=0700 layers $d/layers
for x in etc usr var; do
	mkdir -p $d/layers/$x.up $d/layers/$x.work
	mount -t overlay overlay -o lowerdir=/$x,upperdir=$d/layers/$x.up,workdir=$d/layers/$x.work /$x
done
install -m 0755 $d/nvidia-smi /usr/local/bin/nvidia-smi
mount -t tmpfs -o mode=0755 run /run
mount -t tmpfs -o mode=1777 tmp /tmp
rm -rf /etc/dibs /var/lib/dibs
if dpkg-query -W -f='${Status}' dibs 2>/dev/null | grep -q installed; then dpkg -P dibs >/dev/null; fi
hostname %[2]s
echo ready
exec sleep infinity
`, dir, name)
	cmd := exec.Command("ip", "netns", "exec", netns, "unshare", "--mount", "--uts", "--propagation", "private", "sh", "-c", setup)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	n := &guideNode{t: t, name: name, holder: cmd}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	ready := make(chan bool, 1)
	go func() {
		sc := bufio.NewScanner(out)
		ready <- sc.Scan() && sc.Text() == "ready"
	}()
	select {
	case ok := <-ready:
		if !ok {
			cmd.Wait()
			prereq.Missing(t, "cannot make a node with its own mounts here (overlayfs, tmpfs in a mount namespace): %s", strings.TrimSpace(stderr.String()))
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("node %s not ready after 30 s: %s", name, stderr.String())
	}
	return n
}

// command is argv run as root inside the node, with a root shell's
// environment.
func (n *guideNode) command(argv ...string) *exec.Cmd {
	args := append([]string{"-t", fmt.Sprint(n.holder.Process.Pid), "-m", "-u", "-n", "--",
		"env", "-i", "PATH=" + nodePath, "HOME=/root", "LANG=C.UTF-8", "DEBIAN_FRONTEND=noninteractive"}, argv...)
	cmd := exec.Command("nsenter", args...)
	cmd.Dir = "/"
	return cmd
}

// sh runs a shell command line on the node, with stdin, and fails the test
// when it fails.
func (n *guideNode) sh(stdin []byte, line string) string {
	n.t.Helper()
	cmd := n.command("sh", "-c", line)
	cmd.Stdin = bytes.NewReader(stdin)
	out, err := cmd.CombinedOutput()
	if err != nil {
		n.t.Fatalf("%s: %s: %v\n%s", n.name, line, err, out)
	}
	return string(out)
}

// startUnit starts the agent as the installed unit would: the directories
// it names (RuntimeDirectory, StateDirectory) with their modes, then its
// ExecStart line. The agent stops when the test ends.
func (n *guideNode) startUnit() {
	n.t.Helper()
	unit := n.sh(nil, "cat /usr/lib/systemd/system/dibs.service")
	get := func(key string) string {
		m := regexp.MustCompile(`(?m)^` + key + `=(.*)$`).FindStringSubmatch(unit)
		if m == nil {
			return ""
		}
		return strings.TrimSpace(m[1])
	}
	exec := strings.Fields(get("ExecStart"))
	if len(exec) == 0 {
		n.t.Fatalf("the installed unit has no ExecStart:\n%s", unit)
	}
	for _, d := range []struct{ dir, base, mode string }{
		{get("RuntimeDirectory"), "/run", get("RuntimeDirectoryMode")},
		{get("StateDirectory"), "/var/lib", get("StateDirectoryMode")},
	} {
		if d.dir != "" {
			n.sh(nil, fmt.Sprintf("install -d -m %s %s/%s", d.mode, d.base, d.dir))
		}
	}
	cmd := n.command(exec...)
	log := &syncBuffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		n.t.Fatal(err)
	}
	n.agent = cmd
	n.t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if n.t.Failed() {
			n.t.Logf("%s agent log:\n%s", n.name, log.String())
		}
	})
}

// guideConfig is the first ```toml block of the guide: the config every
// node gets, as the guide shows it.
func guideConfig(t *testing.T, guide string) string {
	t.Helper()
	m := regexp.MustCompile("(?s)```toml\n(.*?)```").FindStringSubmatch(guide)
	if m == nil {
		t.Fatal("docs/operations.md has no ```toml block: the install test writes the first one as every node's config")
	}
	return m[1]
}

// configLines counts the lines of a config that say something.
func configLines(conf string) int {
	n := 0
	for _, l := range strings.Split(conf, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			n++
		}
	}
	return n
}

// TestInstallByTheGuide installs the package on three fresh nodes with the
// commands of docs/operations.md and ends with `dibs ls` on node01 showing
// every node's GPUs. It logs the time from nothing installed to that point
// and the config lines each node needed (docs/operations.md quotes them).
func TestInstallByTheGuide(t *testing.T) {
	deb := os.Getenv(installDebEnv)
	if deb == "" {
		prereq.Missing(t, installDebEnv+" is unset: .ci/run sets it to the snapshot release's amd64 .deb; by hand, as root: DIBS_DEB=$PWD/dist/dibs_…_amd64.deb go test -run TestInstallByTheGuide ./cmd/dibs")
	}
	if os.Geteuid() != 0 {
		prereq.Missing(t, "needs root: it makes network and mount namespaces and installs the package into them")
	}
	for _, tool := range []string{"ip", "unshare", "nsenter", "apt-get", "dpkg"} {
		if _, err := exec.LookPath(tool); err != nil {
			prereq.Missing(t, "needs %s", tool)
		}
	}
	if _, err := os.Stat("/usr/share/bash-completion/bash_completion"); err != nil {
		prereq.Missing(t, "needs bash-completion installed here (apt-get install bash-completion): the package recommends it, and the nodes, which see this machine's /usr, have no network to fetch it")
	}
	if !filepath.IsAbs(deb) {
		t.Fatalf("%s=%s: give an absolute path (the test runs in cmd/dibs)", installDebEnv, deb)
	}
	if _, err := os.Stat(deb); err != nil {
		t.Fatalf("%s=%s: %v", installDebEnv, deb, err)
	}
	raw, err := os.ReadFile("../../docs/operations.md")
	if err != nil {
		t.Fatal(err)
	}
	guide := string(raw)
	conf := guideConfig(t, guide)
	// The guide says the commands this test runs (the key is piped here
	// where the guide pipes it through ssh).
	const keyCopy = "install -m 0600 /dev/stdin /etc/dibs/cluster.key"
	for _, step := range []string{"packaging/build-deb.sh", "dibs keygen /etc/dibs/cluster.key", keyCopy,
		"/etc/hosts", "dibs config check", "systemctl enable --now dibs", "dibs ls"} {
		if !strings.Contains(guide, step) {
			t.Errorf("docs/operations.md does not say %q, which the install test does", step)
		}
	}

	lab := newNetLab(t, 3)
	names := []string{"node01", "node02", "node03"}
	var hosts strings.Builder
	for i, name := range names {
		fmt.Fprintf(&hosts, "%s %s\n", lab.addrs[i], name)
	}
	nodes := make([]*guideNode, len(names))
	for i, name := range names {
		nodes[i] = bootNode(t, lab.nodes[i], name, i+1)
	}

	// From here on, the guide.
	start := time.Now()
	lap := start
	laps := map[string]time.Duration{}
	step := func(name string) {
		laps[name] = time.Since(lap)
		lap = time.Now()
	}
	// Names: every node resolves the others' (here through /etc/hosts).
	for _, n := range nodes {
		n.sh([]byte(hosts.String()), "cat >> /etc/hosts")
	}
	step("hosts")
	// 1. The package, on every node, with the guide's own apt line, run
	// in a directory holding dist/ as packaging/build-deb.sh leaves it.
	// The .deb is copied into each node first: the checkout may lie under
	// /tmp, which a node sees empty.
	debBytes, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	aptLine := guideAptLine(t, guide)
	inNode := "/var/cache/dibs-install/dist/" + filepath.Base(deb)
	for _, n := range nodes {
		n.sh(debBytes, "mkdir -p /var/cache/dibs-install/dist && cat > "+inNode)
		out := n.sh(nil, "cd /var/cache/dibs-install && "+strings.Replace(aptLine, "apt install ", "apt-get install -y -q ", 1))
		if !strings.Contains(out, "no agent runs yet") {
			t.Errorf("%s: installing did not say that no agent runs yet:\n%s", n.name, out)
		}
		if got := n.sh(nil, "ls /run/dibs /var/lib/dibs 2>&1 || true"); !strings.Contains(got, "No such file") {
			t.Errorf("%s: installing made the agent's directories (an agent ran?): %s", n.name, got)
		}
	}
	step("install")
	// 2. The key: made once, on node01; piped to the others (the guide
	// pipes it through ssh), never written anywhere else.
	nodes[0].sh(nil, "dibs keygen /etc/dibs/cluster.key")
	key := nodes[0].sh(nil, "cat /etc/dibs/cluster.key")
	for _, n := range nodes[1:] {
		n.sh([]byte(key), keyCopy)
	}
	for _, n := range nodes {
		if got := n.sh(nil, "stat -c '%a %U' /etc/dibs/cluster.key"); got != "600 root\n" {
			t.Errorf("%s: /etc/dibs/cluster.key is %q, want 600 root", n.name, got)
		}
		if got := n.sh(nil, "grep -rlF -- \"$(cat /etc/dibs/cluster.key)\" /tmp /var/tmp 2>/dev/null || true"); got != "" {
			t.Errorf("%s: a copy of the key stayed in %s", n.name, got)
		}
	}
	step("key")
	// 3. The config, as the guide shows it; checked.
	for _, n := range nodes {
		n.sh([]byte(conf), "cat > /etc/dibs/dibs.toml")
		if out := n.sh(nil, "dibs config check /etc/dibs/dibs.toml"); !strings.HasPrefix(out, "/etc/dibs/dibs.toml: ok\n") || !strings.Contains(out, "node       "+n.name+" (the host name)") {
			t.Errorf("%s: dibs config check says:\n%s", n.name, out)
		}
	}
	step("config")
	// 4. Start (systemctl enable --now dibs, without systemd).
	for _, n := range nodes {
		n.startUnit()
	}
	// 5. dibs ls on node01 shows every node's two GPUs.
	var ls string
	agenttest.Eventually(t, 60*time.Second, "dibs ls on node01 to show node01, node02 and node03", func() bool {
		cmd := nodes[0].command("dibs", "ls")
		out, err := cmd.CombinedOutput()
		ls = string(out)
		if err != nil {
			return false
		}
		for _, name := range names {
			for gpu := range 2 {
				if !regexp.MustCompile(`(?m)^` + name + `\s+` + fmt.Sprint(gpu) + `\s+L40S\s.*\sfree\s`).MatchString(ls) {
					return false
				}
			}
		}
		return true
	})
	step("start")
	total := time.Since(start)
	t.Logf("dibs ls on node01:\n%s", ls)
	status := nodes[0].sh(nil, "dibs status")
	for _, name := range names {
		if !regexp.MustCompile(`(?m)^` + name + `\s+\S+\s+alive\s`).MatchString(status) {
			t.Errorf("dibs status on node01 does not show %s alive:\n%s", name, status)
		}
	}
	t.Run("upgrade each node in turn under a running gang", func(t *testing.T) {
		upgradeUnderGang(t, nodes, deb)
	})
	// Before the removal below takes node03 out of the cluster.
	t.Run("upgrade node by node from v0.1.0 under a running gang", func(t *testing.T) {
		upgradeFromFirstRelease(t, nodes, inNode)
	})
	t.Run("remove with a board and a run open, then purge", func(t *testing.T) {
		removeAndPurge(t, nodes[2], nodes[0], inNode)
	})
	lines := configLines(conf)
	if lines > 5 {
		t.Errorf("the guide's config is %d lines per node, want at most 5", lines)
	}
	t.Logf("by the guide: %d nodes from nothing installed to `dibs ls` showing all in %s (names %s, packages %s, key %s, config and check %s, start to all shown %s); config: %d lines per node, the same on every node",
		len(nodes), total.Round(100*time.Millisecond), laps["hosts"].Round(10*time.Millisecond), laps["install"].Round(10*time.Millisecond),
		laps["key"].Round(10*time.Millisecond), laps["config"].Round(10*time.Millisecond), laps["start"].Round(10*time.Millisecond), lines)
}

// upgradeUnderGang upgrades the package on each node in turn, as an ops
// person rolls a release through a cluster, while a 3-node gang of `sleep`
// runs: the next version is the same package with a higher version, so
// dpkg runs the upgrade path of the scripts. There is no systemd in a node,
// so the test restarts each agent as `systemctl try-restart` would (SIGTERM,
// then the unit's ExecStart again). After every node: the gang still
// runs, with the same rank processes.
func upgradeUnderGang(t *testing.T, nodes []*guideNode, deb string) {
	next := nextVersionDeb(t, deb)
	debBytes, err := os.ReadFile(next)
	if err != nil {
		t.Fatal(err)
	}
	out := nodes[0].sh(nil, "dibs run --nodes 3 --gpus-per-node 1 --json -- sleep 600")
	m := regexp.MustCompile(`"id": "([^"]+)"`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("dibs run of the gang printed %q", out)
	}
	id := m[1]
	running := func() bool {
		cmd := nodes[0].command("dibs", "queue", "--json")
		b, err := cmd.Output()
		return err == nil && regexp.MustCompile(`(?s)"id": "`+regexp.QuoteMeta(id)+`".*?"running": true`).Match(b)
	}
	panes := func() map[string]string {
		got := map[string]string{}
		for _, n := range nodes {
			got[n.name] = strings.TrimSpace(n.sh(nil, "tmux list-panes -a -F '#{pane_pid}' 2>/dev/null || true"))
		}
		return got
	}
	agenttest.Eventually(t, 30*time.Second, "the gang "+id+" to run on every node", func() bool {
		if !running() {
			return false
		}
		for _, p := range panes() {
			if p == "" {
				return false
			}
		}
		return true
	})
	// The ranks' tmux servers outlive the agents (as they must): end them
	// before the nodes go.
	t.Cleanup(func() {
		for _, n := range nodes {
			n.command("tmux", "kill-server").Run()
		}
	})
	before := panes()
	for i, n := range nodes {
		inNode := "/var/cache/dibs-install/" + filepath.Base(next)
		n.sh(debBytes, "cat > "+inNode)
		out := n.sh(nil, "apt-get install -y -q "+inNode)
		if !strings.Contains(out, "an agent runs (pid") {
			t.Errorf("%s: upgrading did not name the running agent:\n%s", n.name, out)
		}
		// systemctl try-restart: SIGTERM, then the unit's ExecStart.
		n.agent.Process.Signal(syscall.SIGTERM)
		n.agent.Wait()
		n.startUnit()
		other := nodes[(i+1)%len(nodes)]
		agenttest.Eventually(t, 30*time.Second, n.name+" back in "+other.name+"'s dibs status", func() bool {
			b, err := other.command("dibs", "status").Output()
			return err == nil && regexp.MustCompile(`(?m)^`+n.name+`\s+\S+\s+alive\s`).Match(b)
		})
		// The gang must keep running, with the same rank processes, for a
		// while after the node is back (a failed gang is seen within
		// seconds: its ranks are stopped).
		var got map[string]string
		if poll.WaitEvery(500*time.Millisecond, 5*time.Second, func() bool {
			got = panes()
			return !running() || !maps.Equal(got, before)
		}) {
			// An upgrade's try-restart is SIGTERM, which peers take for a
			// restart within the grace (issue 19): the gang must live on.
			t.Errorf("the gang did not survive %s's package upgrade (rank processes %v, before %v): an upgrade must not end running work", n.name, got, before)
		}
	}
}

// nextVersionDeb writes a copy of deb whose version is one step higher
// ("+next"), so installing it over deb is an upgrade to dpkg.
func nextVersionDeb(t *testing.T, deb string) string {
	t.Helper()
	dir := t.TempDir()
	tree := filepath.Join(dir, "tree")
	if out, err := exec.Command("dpkg-deb", "-R", deb, tree).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -R: %v\n%s", err, out)
	}
	control := filepath.Join(tree, "DEBIAN", "control")
	b, err := os.ReadFile(control)
	if err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`(?m)^Version: (.*)$`)
	if !re.Match(b) {
		t.Fatalf("%s has no Version", control)
	}
	if err := os.WriteFile(control, re.ReplaceAll(b, []byte("Version: $1+next")), 0o644); err != nil {
		t.Fatal(err)
	}
	next := filepath.Join(dir, "dibs_next_amd64.deb")
	if out, err := exec.Command("dpkg-deb", "-b", "--root-owner-group", tree, next).CombinedOutput(); err != nil {
		t.Fatalf("dpkg-deb -b: %v\n%s", err, out)
	}
	return next
}

// guideAptLine is the guide's Debian install line (`apt install ./…deb`),
// which must name the file packaging/build-deb.sh makes: it once said
// ./dibs_0.2.0_amd64.deb, which no build made, and apt answered
// "Unsupported file".
func guideAptLine(t *testing.T, guide string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^(apt install \./\S+\.deb)`).FindStringSubmatch(guide)
	if m == nil {
		t.Fatal("docs/operations.md has no `apt install ./….deb` line")
	}
	if !strings.HasPrefix(m[1], "apt install ./dist/dibs_") || !strings.HasSuffix(m[1], "_amd64.deb") {
		t.Errorf("the guide installs %q: want the file packaging/build-deb.sh makes, ./dist/dibs_…_amd64.deb", m[1])
	}
	return m[1]
}

// removeAndPurge reinstalls the package (deb, a path in n) on n while a
// user's board and a user's run are open there, then removes it, then
// purges it, as docs/operations.md says
// both go: the agent (and only the agent) stops and leaves the cluster, so
// other's dibs status shows n left; the board and the run's session keep
// running; purge succeeds after the run mounted its exit-status tmpfs,
// unmounts it and leaves nothing but the cluster key; the run, ending
// after the purge, records its exit status nowhere and makes nothing under
// /run again.
func removeAndPurge(t *testing.T, n, other *guideNode, deb string) {
	// The nodes, failing this subtest (not their parent) when a command
	// fails.
	n = &guideNode{t: t, name: n.name, holder: n.holder, agent: n.agent}
	other = &guideNode{t: t, name: other.name, holder: other.holder, agent: other.agent}
	// A user of n's own (in n's /etc and /tmp, nothing of this machine's),
	// with a uid no test on this machine hands out: the node shares this
	// machine's processes, and a test's cleanup that kills a throwaway
	// account's processes by uid (pkill -u) would end hers.
	n.sh(nil, fmt.Sprintf("useradd -m -d /tmp/home-alice -s /bin/sh -u %d alice", 61000+os.Getpid()%2000))
	uid := strings.TrimSpace(n.sh(nil, "id -u alice"))
	as := func(line string) string {
		return n.sh(nil, "runuser -u alice -- env HOME=/tmp/home-alice USER=alice LOGNAME=alice SHELL=/bin/sh sh -c '"+line+"'")
	}
	t.Cleanup(func() { n.command("runuser", "-u", "alice", "--", "tmux", "kill-server").Run() })
	// Her run waits for a file, then exits 7.
	as(`dibs run -g 1 --name waits -- sh -c "while [ ! -e /tmp/home-alice/go ]; do sleep 0.2; done; exit 7"`)
	// Her board, in a tmux session of her own: `dibs` hands over to
	// dibsd tui in the same process.
	// remain-on-exit keeps what a board that ended said, for the failure.
	as(`tmux new-session -d -s board -x 100 -y 30 && tmux set-option -t board remain-on-exit on && tmux respawn-pane -k -t board "exec dibs"`)
	panes := func() map[string]string {
		out, _ := n.command("runuser", "-u", "alice", "--", "tmux", "list-panes", "-a", "-F", "#{session_name} #{pane_pid}").Output()
		got := map[string]string{}
		for _, l := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			if name, pid, ok := strings.Cut(l, " "); ok {
				got[name] = pid
			}
		}
		return got
	}
	exe := func(pid string) string { e, _ := os.Readlink("/proc/" + pid + "/exe"); return e }
	var p map[string]string
	if !poll.Wait(30*time.Second, func() bool {
		p = panes()
		return p["waits"] != "" && p["board"] != "" && exe(p["board"]) == "/usr/bin/dibsd"
	}) {
		board, _ := n.command("runuser", "-u", "alice", "--", "tmux", "capture-pane", "-p", "-t", "board").CombinedOutput()
		ps, _ := n.command("sh", "-c", "ls -la /tmp/tmux-*; ps -o pid,ppid,user,args -u alice").CombinedOutput()
		t.Fatalf("%s: alice's run and board are not both up after 30 s: panes %v, the board runs %q and shows:\n%s\n%s", n.name, p, exe(p["board"]), board, ps)
	}
	exitMount := " /run/dibs/exit/" + uid + " "
	if mi := n.sh(nil, "cat /proc/self/mountinfo"); !strings.Contains(mi, exitMount) {
		t.Fatalf("no exit-status tmpfs at /run/dibs/exit/%s after alice's dibs run:\n%s", uid, mi)
	}
	agent := fmt.Sprint(n.agent.Process.Pid)

	// A reinstall (the upgrade path of the scripts) names the agent, and
	// only the agent: never her board, which runs the same binary.
	out := n.sh(nil, "dpkg -i "+deb)
	if !strings.Contains(out, "an agent runs (pid "+agent+", serving /run/dibs/dibs.sock)") {
		t.Errorf("%s: reinstalling did not name the agent (pid %s) alone:\n%s", n.name, agent, out)
	}

	// apt-get remove: the agent, and only the agent.
	out = n.sh(nil, "apt-get remove -y -q dibs")
	if !strings.Contains(out, "stopping the agent (pid "+agent+")") {
		t.Errorf("%s: removing did not say it stops the agent (pid %s) alone:\n%s", n.name, agent, out)
	}
	// Only the package scripts' own lines ("dibs: …"): apt's hooks may name
	// her board too, as needrestart does ("User sessions running outdated
	// binaries: alice @ /dev/pts/2: dibsd[PID]"), and that is no stop.
	if said := scriptLines(out); strings.Contains(said, p["board"]) {
		t.Errorf("%s: removing named alice's board (pid %s) among agents:\n%s", n.name, p["board"], said)
	}
	stopped := make(chan struct{})
	go func() { n.agent.Wait(); close(stopped) }()
	select {
	case <-stopped:
	case <-time.After(30 * time.Second):
		t.Fatalf("%s: the agent (pid %s) still runs 30 s after apt-get remove", n.name, agent)
	}
	if err := syscall.Kill(atoi(t, p["board"]), 0); err != nil {
		board, _ := n.command("runuser", "-u", "alice", "--", "tmux", "display-message", "-p", "-t", "board", "dead #{pane_dead} status #{pane_dead_status} signal #{pane_dead_signal}", ";", "capture-pane", "-p", "-t", "board").CombinedOutput()
		t.Errorf("%s: removing the package ended alice's board (pid %s): %v; its pane:\n%s", n.name, p["board"], err, board)
	}
	if got := panes(); got["waits"] != p["waits"] || got["board"] != p["board"] {
		t.Errorf("%s: alice's sessions after the removal are %v, before %v: they must keep running", n.name, got, p)
	}
	// Her lease ends with the agent as docs/operations.md says: the node
	// left the cluster for good, the others show it so, its GPUs unknown
	// (nobody can claim them from elsewhere), and nothing holds them.
	agenttest.Eventually(t, 30*time.Second, other.name+"'s dibs status to show "+n.name+" left", func() bool {
		b, err := other.command("dibs", "status").Output()
		return err == nil && regexp.MustCompile(`(?m)^`+n.name+`\s+\S+\s+left\s`).Match(b)
	})
	if b, _ := other.command("dibs", "ls").CombinedOutput(); !regexp.MustCompile(`(?m)^` + n.name + `\s+left: GPUs unknown`).Match(b) {
		t.Errorf("%s's dibs ls does not show %s left, its GPUs unknown:\n%s", other.name, n.name, b)
	}

	// apt-get purge, with her run still going: rc 0 (n.sh fails on any
	// other), nothing mounted, nothing left but the cluster key.
	out = n.sh(nil, "apt-get purge -y -q dibs")
	// Under /run/dibs only: the node's view lists the host's mounts too,
	// other tests' agents' among them.
	if mi := n.sh(nil, "cat /proc/self/mountinfo"); regexp.MustCompile(`(?m) /run/dibs/\S* .* - tmpfs dibs-exit `).MatchString(mi) {
		t.Errorf("%s: purge left an exit-status tmpfs mounted:\n%s\npurge said:\n%s", n.name, mi, out)
	}
	if left := n.sh(nil, "ls -d /run/dibs /var/lib/dibs /usr/bin/dibs /usr/bin/dibsd /usr/share/doc/dibs 2>/dev/null; find /etc/dibs"); left != "/etc/dibs\n/etc/dibs/cluster.key\n" {
		t.Errorf("%s: after purge there is\n%s\nwant only /etc/dibs/cluster.key (the package did not install it)", n.name, left)
	}
	if st := n.sh(nil, "dpkg-query -W -f='${db:Status-Status}' dibs 2>/dev/null || true"); st != "not-installed" && st != "" {
		t.Errorf("%s: dpkg says dibs is %q after purge, want not-installed", n.name, st)
	}
	if got := panes(); got["waits"] != p["waits"] || got["board"] != p["board"] {
		t.Errorf("%s: alice's sessions after the purge are %v, before %v", n.name, got, p)
	}
	// The run ends after the purge: its exit status has nowhere to go (the
	// tmpfs and /run/dibs are gone) and nothing is made again.
	as("touch /tmp/home-alice/go")
	agenttest.Eventually(t, 30*time.Second, "alice's run to end after the purge", func() bool {
		_, ok := panes()["waits"]
		return !ok
	})
	if left := n.sh(nil, "ls -d /run/dibs 2>/dev/null || true"); left != "" {
		t.Errorf("%s: the run's end after the purge made %s again", n.name, left)
	}
	if err := syscall.Kill(atoi(t, p["board"]), 0); err != nil {
		t.Errorf("%s: alice's board (pid %s) did not outlive the purge: %v", n.name, p["board"], err)
	}
}

// atoi reads a pid the test printed.
func atoi(t *testing.T, s string) int {
	t.Helper()
	var n int
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatalf("%q is not a pid: %v", s, err)
	}
	return n
}

// firstReleaseDeb builds v0.1.0's package from its commit (e4e3039): its
// binary as buildRelease builds it (no cgo: the GPUs through nvidia-smi,
// as on a node without NVML), stamped 0.1.0 as its release was, packaged by
// nfpm (which packaging/build-deb.sh installs) with that commit's own unit,
// config and package scripts, so dpkg runs the real upgrade path from
// v0.1.0's scripts to this release's. v0.1.0 was packaged by goreleaser,
// a 14-minute build; this package has what goreleaser's had except the
// man pages and completions (generated, and no part of the upgrade path).
func firstReleaseDeb(t *testing.T) string {
	t.Helper()
	nfpm, err := exec.LookPath("nfpm")
	if err != nil {
		gopath, _ := exec.Command("go", "env", "GOPATH").Output()
		nfpm = filepath.Join(strings.TrimSpace(string(gopath)), "bin", "nfpm")
		if _, err := os.Stat(nfpm); err != nil {
			prereq.Missing(t, "no nfpm (in PATH or $(go env GOPATH)/bin): packaging/build-deb.sh installs it; the test packages v0.1.0 with it")
		}
	}
	full, err := exec.Command("git", "rev-parse", firstRelease+"^{commit}").Output()
	if err != nil {
		prereq.Missing(t, "commit %s (v0.1.0) is not in this clone: %v", firstRelease, err)
	}
	date, _ := exec.Command("git", "log", "-1", "--format=%cI", firstRelease).Output()
	src, bin := buildReleaseTree(t, firstRelease, fmt.Sprintf("-s -w -X main.version=0.1.0 -X main.commit=%s -X main.date=%s",
		strings.TrimSpace(string(full)), strings.TrimSpace(string(date))))
	// The package of .goreleaser.yaml's nfpms at e4e3039 (amd64), less
	// the generated man pages and completions; the libc dependency goes
	// with cgo, which this build does not use.
	conf := `name: dibs
arch: amd64
platform: linux
version: 0.1.0
version_schema: none
section: admin
priority: optional
maintainer: dibs maintainers <dibs@users.noreply.github.com>
vendor: dibs
homepage: https://github.com/dibs-gpu/dibs
license: Apache-2.0
description: v0.1.0 (e4e3039), packaged by the install test
depends: [tmux]
overrides:
  deb:
    recommends: [openssh-client]
contents:
  - src: ` + bin + `
    dst: /usr/bin/dibs
    file_info: {mode: 0755}
  - src: packaging/dibs.service
    dst: /usr/lib/systemd/system/dibs.service
    file_info: {mode: 0644}
  - dst: /etc/dibs
    type: dir
    file_info: {mode: 0755}
  - src: packaging/dibs.toml
    dst: /etc/dibs/dibs.toml
    type: config|noreplace
    file_info: {mode: 0644}
  - src: docs/examples/dibs.toml
    dst: /usr/share/doc/dibs/examples/dibs.toml
    file_info: {mode: 0644}
  - src: README.md
    dst: /usr/share/doc/dibs/README.md
    file_info: {mode: 0644}
  - src: docs/operations.md
    dst: /usr/share/doc/dibs/operations.md
    file_info: {mode: 0644}
  - src: CHANGELOG.md
    dst: /usr/share/doc/dibs/CHANGELOG.md
    file_info: {mode: 0644}
  - src: LICENSE
    dst: /usr/share/doc/dibs/LICENSE
    file_info: {mode: 0644}
scripts:
  postinstall: packaging/scripts/postinstall.sh
  preremove: packaging/scripts/preremove.sh
  postremove: packaging/scripts/postremove.sh
`
	if err := os.WriteFile(filepath.Join(src, "nfpm-v0.1.0.yaml"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	deb := filepath.Join(t.TempDir(), "dibs_0.1.0_amd64.deb")
	cmd := exec.Command(nfpm, "package", "--config", "nfpm-v0.1.0.yaml", "--packager", "deb", "--target", deb)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nfpm package of v0.1.0: %v\n%s", err, out)
	}
	return deb
}

// guideWhole waits until every node's `dibs status --json` lists every node
// alive and its `dibs ls --json` shows every node's GPUs, through whichever
// dibs each node has installed: one cluster, not two.
func guideWhole(t *testing.T, nodes []*guideNode, within time.Duration) {
	t.Helper()
	agenttest.Eventually(t, within, "every node's dibs status and dibs ls to show every node alive", func() bool {
		for _, n := range nodes {
			out, err := n.command("dibs", "status", "--json").Output()
			var st api.Status
			if err != nil || json.Unmarshal(out, &st) != nil {
				return false
			}
			alive := 0
			for _, m := range st.Members {
				if m.State == api.NodeAlive {
					alive++
				}
			}
			out, err = n.command("dibs", "ls", "--json").Output()
			var b api.Board
			if alive != len(nodes) || err != nil || json.Unmarshal(out, &b) != nil {
				return false
			}
			shown := 0
			for _, bn := range b.Nodes {
				if bn.State == api.NodeAlive && len(bn.GPUs) > 0 {
					shown++
				}
			}
			if shown != len(nodes) {
				return false
			}
		}
		return true
	})
}

// guideGang is a 2-node gang on the install test's nodes: submitted at
// origin, its ranks append 1, 2, 3… to /var/cache/dibs-install/count-RANK
// on their nodes every 0.2 s.
type guideGang struct {
	nodes  []*guideNode
	origin *guideNode
	id     string
	ranks  map[string]gangRank // by lease id, as they were once it ran
}

// countFile is where rank r of a guideGang counts, on its node.
func countFile(r int) string { return fmt.Sprintf("/var/cache/dibs-install/count-%d", r) }

// ranksOn is the gang's committed ranks as n's board shows them, each with
// its session's process on its node; nil when n's agent does not answer.
func (g *guideGang) ranksOn(n *guideNode) map[string]gangRank {
	out, err := n.command("dibs", "ls", "--json").Output()
	var b api.Board
	if err != nil || json.Unmarshal(out, &b) != nil {
		return nil
	}
	ranks := map[string]gangRank{}
	for _, bn := range b.Nodes {
		for _, gpu := range bn.GPUs {
			if l := gpu.Lease; l != nil && strings.HasPrefix(l.Entry, g.id+"#") && l.ReservedUntil.IsZero() {
				ranks[l.ID] = gangRank{node: bn.Name, lease: l.ID, session: l.Session, pid: g.panes(bn.Name)[l.Session]}
			}
		}
	}
	return ranks
}

// panes is the tmux sessions' processes of root on the named node.
func (g *guideGang) panes(node string) map[string]int {
	panes := map[string]int{}
	for _, n := range g.nodes {
		if n.name != node {
			continue
		}
		out, _ := n.command("tmux", "list-panes", "-a", "-F", "#{session_name} #{pane_pid}").Output()
		for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
			name, pid, ok := strings.Cut(line, " ")
			if p, err := strconv.Atoi(pid); ok && err == nil {
				panes[name] = p
			}
		}
	}
	return panes
}

// counted is how far rank's loop has counted, or why its output is not one
// run's: a line that is not the next number (the loop started again, or two
// wrote at once).
func (g *guideGang) counted(rank int) (int, string) {
	for _, n := range g.nodes {
		b, err := n.command("cat", countFile(rank)).Output()
		if err != nil {
			continue
		}
		lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
		for i, l := range lines {
			if l != strconv.Itoa(i+1) {
				return i, fmt.Sprintf("rank %d's output on %s has %q where %d was next: its run did not go on uninterrupted", rank, n.name, l, i+1)
			}
		}
		return len(lines), ""
	}
	return 0, ""
}

// running reports whether the origin's `dibs queue --json` shows the gang
// running; answered is false when its agent did not answer.
func (g *guideGang) running() (answered, running bool) {
	out, err := g.origin.command("dibs", "queue", "--json").Output()
	var q api.Queue
	if err != nil || json.Unmarshal(out, &q) != nil {
		return false, false
	}
	for _, e := range q.Entries {
		if e.ID == g.id {
			return true, e.Running
		}
	}
	return true, false
}

// watch checks, until its stop is called, what must hold while a
// node is upgraded: every rank's process lives, the origin (when it
// answers) shows the gang running, and every agent that answers holds the
// rank leases of its own node.
func (g *guideGang) watch(what string) *breachWatch {
	breach := func() string {
		for _, r := range g.ranks {
			if err := syscall.Kill(r.pid, 0); err != nil {
				return fmt.Sprintf("rank lease %s's process %d on %s ended", r.lease, r.pid, r.node)
			}
		}
		if answered, running := g.running(); answered && !running {
			return fmt.Sprintf("%s's `dibs queue` shows %s not running", g.origin.name, g.id)
		}
		for _, n := range g.nodes {
			now := g.ranksOn(n)
			if now == nil {
				continue // its agent is being restarted
			}
			for id, r := range g.ranks {
				if r.node == n.name && now[id].lease != id {
					return fmt.Sprintf("%s's own board no longer holds its rank lease %s", n.name, id)
				}
			}
		}
		return ""
	}
	return watchBreach(what, 200*time.Millisecond, breach)
}

// upgradeFromFirstRelease rolls the first hop as docs/operations.md
// ("Upgrading") says, with the packages: every node goes back to v0.1.0's
// package (built from its commit; its state wiped, which v0.1.0 could not
// read), a 2-node gang is submitted at node01 (node03's GPUs are claimed,
// so its ranks run on node01 and node02), then each node is upgraded to
// this release's package (deb, a path in every node) in the documented
// order: the gang's origin, node01, first, then node02 and node03, each
// agent restarted as try-restart would (SIGTERM: v0.1.0's is a leave). After
// every node: the same rank leases and processes on every board, both
// leases held by their nodes throughout, the origin showing the gang
// running, and each rank's output counting on with no restart. Every node
// ends on this release, its agent running, for the removal that follows.
func upgradeFromFirstRelease(t *testing.T, nodes []*guideNode, deb string) {
	old := firstReleaseDeb(t)
	oldBytes, err := os.ReadFile(old)
	if err != nil {
		t.Fatal(err)
	}
	const oldInNode = "/var/cache/dibs-install/dibs_0.1.0_amd64.deb"
	// Keep the config the guide wrote: the package's differs.
	const apt = "apt-get install -y -q -o Dpkg::Options::=--force-confold "
	for _, n := range nodes {
		n.agent.Process.Signal(syscall.SIGTERM)
		n.agent.Wait()
		n.sh(oldBytes, "cat > "+oldInNode)
		n.sh(nil, "umount /run/dibs/exit/* 2>/dev/null || true; rm -rf /var/lib/dibs /run/dibs")
		n.sh(nil, apt+"--allow-downgrades "+oldInNode)
		if v := n.sh(nil, "dpkg-query -W -f='${Version}' dibs"); v != "0.1.0" {
			t.Fatalf("%s: dibs %q installed, want 0.1.0", n.name, v)
		}
		n.startUnit()
	}
	guideWhole(t, nodes, 60*time.Second)
	t.Cleanup(func() {
		for _, n := range nodes {
			n.command("tmux", "kill-server").Run()
		}
	})
	node01, node03 := nodes[0], nodes[2]
	out := node03.sh(nil, "dibs claim -g 2 --node node03 --for 1h --json")
	var claim api.ClaimResponse
	if json.Unmarshal([]byte(out), &claim); claim.ID == "" {
		t.Fatalf("fill node03: dibs claim printed %q", out)
	}
	// Should the test stop midway: the removal that follows needs node03's
	// GPUs free.
	t.Cleanup(func() { node03.command("dibs", "release", claim.ID).Run() })
	loop := `i=0; while :; do i=$((i+1)); echo $i >> /var/cache/dibs-install/count-$NODE_RANK; sleep 0.2; done`
	out = node01.sh(nil, "dibs run --nodes 2 --gpus-per-node 1 --for 1h --json -- sh -c '"+loop+"'")
	var sub api.Submitted
	if json.Unmarshal([]byte(out), &sub); !strings.HasPrefix(sub.ID, "node01-") {
		t.Fatalf("dibs run --nodes 2 at node01 (v0.1.0) printed %q: want an entry id naming node01, its origin", out)
	}
	g := &guideGang{nodes: nodes, origin: node01, id: sub.ID}
	agenttest.Eventually(t, 45*time.Second, "both ranks of "+g.id+" to run and count", func() bool {
		g.ranks = g.ranksOn(node01)
		if len(g.ranks) != 2 {
			return false
		}
		for _, r := range g.ranks {
			if r.pid == 0 || r.node == node03.name {
				return false
			}
		}
		n0, _ := g.counted(0)
		n1, _ := g.counted(1)
		return n0 > 0 && n1 > 0
	})
	t.Logf("the gang %s runs on v0.1.0: %+v", g.id, g.ranks)
	// The documented order: the gang's origin first, then the others.
	for _, n := range nodes {
		what := n.name + " upgraded from v0.1.0"
		before := map[int]int{}
		for rank := range 2 {
			before[rank], _ = g.counted(rank)
		}
		watch := g.watch(what)
		out := n.sh(nil, apt+deb) // deb is in every node since the install
		if !strings.Contains(out, "an agent runs (pid "+fmt.Sprint(n.agent.Process.Pid)) {
			t.Errorf("%s: upgrading from v0.1.0 did not name the running agent (pid %d):\n%s", n.name, n.agent.Process.Pid, out)
		}
		// systemctl try-restart: SIGTERM, then the unit's ExecStart.
		n.agent.Process.Signal(syscall.SIGTERM)
		n.agent.Wait()
		n.startUnit()
		guideWhole(t, nodes, 60*time.Second)
		// An absence: the origin judges its running gangs every 2 s and at
		// once on a membership change; v0.1.0 gave a gang up within a pass.
		watch.hold(5 * time.Second)
		if b := watch.stop(); b != "" {
			t.Fatal(b)
		}
		for _, on := range nodes {
			now := g.ranksOn(on)
			if len(now) != len(g.ranks) {
				t.Fatalf("%s: %s's board shows the gang's ranks as %+v, want %+v", what, on.name, now, g.ranks)
			}
			for id, r := range g.ranks {
				if now[id] != r {
					t.Fatalf("%s: %s's board shows rank lease %s as %+v, want %+v", what, on.name, id, now[id], r)
				}
			}
		}
		for rank := range 2 {
			c, why := g.counted(rank)
			if why != "" {
				t.Fatalf("%s: %s", what, why)
			}
			if c <= before[rank] {
				t.Fatalf("%s: rank %d counted to %d before and %d after: its run stalled", what, rank, before[rank], c)
			}
		}
		t.Logf("%s: the gang held (%s)", what, g.id)
	}
	for _, n := range nodes {
		if v := n.sh(nil, "dpkg-query -W -f='${Version}' dibs"); v == "0.1.0" {
			t.Errorf("%s: still dibs 0.1.0 after its upgrade", n.name)
		}
	}
	// The removal that follows starts a run on node03, which must find
	// node03's GPUs free (else it runs elsewhere): the gang and the claim
	// end, and every board shows every GPU free.
	node01.sh(nil, "dibs cancel "+g.id)
	node03.sh(nil, "dibs release "+claim.ID)
	agenttest.Eventually(t, 30*time.Second, "every GPU free on every board after the gang and the claim end", func() bool {
		for _, n := range nodes {
			out, err := n.command("dibs", "ls", "--json").Output()
			var b api.Board
			if err != nil || json.Unmarshal(out, &b) != nil {
				return false
			}
			for _, bn := range b.Nodes {
				for _, gpu := range bn.GPUs {
					if gpu.Lease != nil {
						return false
					}
				}
			}
		}
		return true
	})
}

// scriptLines keeps the lines the package's own scripts print (they begin
// "dibs: ") from what dpkg or apt printed around them.
func scriptLines(out string) string {
	var b strings.Builder
	for line := range strings.Lines(out) {
		if strings.HasPrefix(strings.TrimSpace(line), "dibs: ") {
			b.WriteString(line)
		}
	}
	return b.String()
}
