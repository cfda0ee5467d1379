package main

import (
	"bufio"
	"bytes"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/internal/poll"
	"github.com/dibs-gpu/dibs/internal/prereq"
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
	for _, step := range []string{"apt install ./dibs_", "dibs keygen /etc/dibs/cluster.key", keyCopy,
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
	// 1. The package, on every node.
	// The .deb is copied into each node first: the checkout may lie under
	// /tmp, which a node sees empty.
	debBytes, err := os.ReadFile(deb)
	if err != nil {
		t.Fatal(err)
	}
	inNode := "/var/cache/dibs-install/" + filepath.Base(deb)
	for _, n := range nodes {
		n.sh(debBytes, "mkdir -p /var/cache/dibs-install && cat > "+inNode)
		out := n.sh(nil, "apt-get install -y -q "+inNode)
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
