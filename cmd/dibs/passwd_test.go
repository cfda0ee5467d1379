package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/base/prereq"
)

// TestSameUIDDifferentPeopleAcrossNodes: two agents whose nodes have
// different account databases (each in its own mount namespace with its own
// /etc/passwd and /etc/group). uid 42003 is mallory on node01 and carol on
// node02; dave exists on both and is an admin on node01 only. A request
// forwarded from node01 acts as node02's account of the *name*: mallory,
// unknown on node02, can neither end nor extend carol's lease there nor run
// as carol; dave's admin rights on node01 count for nothing on node02.
func TestSameUIDDifferentPeopleAcrossNodes(t *testing.T) {
	if os.Geteuid() != 0 {
		prereq.Missing(t, "needs root: runs the agents in mount namespaces with their own /etc/passwd")
	}
	if _, err := exec.LookPath("unshare"); err != nil {
		prereq.Missing(t, "needs unshare (util-linux) for mount namespaces")
	}
	if out, err := exec.Command("unshare", "--mount", "true").CombinedOutput(); err != nil {
		prereq.Missing(t, "cannot make mount namespaces here: %v: %s", err, out)
	}
	dir := agenttest.PublicDir(t)
	passwd, _ := os.ReadFile("/etc/passwd")
	group, _ := os.ReadFile("/etc/group")
	writeDB := func(node string, users, groups []string) (string, string) {
		p, g := filepath.Join(dir, node+".passwd"), filepath.Join(dir, node+".group")
		os.WriteFile(p, []byte(string(passwd)+strings.Join(users, "\n")+"\n"), 0o644)
		os.WriteFile(g, []byte(string(group)+strings.Join(groups, "\n")+"\n"), 0o644)
		return p, g
	}
	home := agenttest.PublicDir(t)
	pA, gA := writeDB("node01",
		[]string{"mallory:x:42003:42003::" + home + ":/bin/sh", "dave:x:42004:42004::" + home + ":/bin/sh"},
		[]string{"mallory:x:42003:", "dave:x:42004:", "labadmin:x:42100:dave"})
	pB, gB := writeDB("node02",
		[]string{"carol:x:42003:42003::" + home + ":/bin/sh", "dave:x:42004:42004::" + home + ":/bin/sh"},
		[]string{"carol:x:42003:", "dave:x:42004:", "labadmin:x:42100:"})
	key := filepath.Join(dir, "cluster.key")
	if _, e, c := dibs(t, filepath.Join(dir, "none.sock"), nil, "keygen", key); c != 0 {
		t.Fatal(e)
	}
	// Each agent gets its own config naming labadmin its admin group: dave
	// is in it on node01 only.
	conf := filepath.Join(dir, "dibs.toml")
	os.WriteFile(conf, []byte("[leases]\nadmin_group = \"labadmin\"\n"), 0o644)
	portA, portB := agenttest.FreePort(t), agenttest.FreePort(t)
	start := func(node, p, g string, port int, join string) string {
		sock := filepath.Join(dir, node, "dibs.sock")
		os.MkdirAll(filepath.Dir(sock), 0o755)
		args := []string{"agent", "--config", conf, "--node-name", node, "--sim", "2xL40S", "--data-dir", filepath.Join(dir, node, "data"),
			"--socket", sock, "--bind", fmt.Sprintf("127.0.0.1:%d", port), "--cluster-key-file", key, "--probe-interval", "200ms"}
		if join != "" {
			args = append(args, "--join", join)
		}
		script := fmt.Sprintf("mount --bind %s /etc/passwd && mount --bind %s /etc/group && exec %s \"$@\"", p, g, dibsBin)
		cmd := exec.Command("unshare", append([]string{"--mount", "--propagation", "private", "sh", "-c", script, "dibs"}, args...)...)
		log := &syncBuffer{}
		cmd.Stdout, cmd.Stderr = log, log
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Signal(syscall.SIGTERM)
			cmd.Wait()
			if t.Failed() {
				t.Logf("%s log:\n%s", node, log)
			}
		})
		return sock
	}
	sockA := start("node01", pA, gA, portA, "")
	sockB := start("node02", pB, gB, portB, fmt.Sprintf("127.0.0.1:%d", portA))
	as := func(uid int) *syscall.Credential { return &syscall.Credential{Uid: uint32(uid), Gid: uint32(uid)} }
	agenttest.Eventually(t, 15*time.Second, "both agents to see both nodes", func() bool {
		a, _, _ := dibs(t, sockA, nil, "ls")
		b, _, _ := dibs(t, sockB, nil, "ls")
		return strings.Count(a, "node0") >= 2 && strings.Count(b, "node0") >= 2 && strings.Contains(a, "node02") && strings.Contains(b, "node01")
	})

	// carol (uid 42003 on node02) claims a GPU there.
	out, errOut, code := dibs(t, sockB, as(42003), "claim", "--ids", "0", "--for", "2h", "--json")
	if code != 0 {
		t.Fatalf("carol's claim on node02: %s", errOut)
	}
	id := jsonField(out, "id")
	agenttest.Eventually(t, 5*time.Second, "node01 to see carol's lease", func() bool {
		o, _, _ := dibs(t, sockA, nil, "ls")
		return strings.Contains(o, id)
	})

	// mallory, uid 42003 on node01, tries carol's lease through node01.
	for _, try := range [][]string{{"release", id}, {"extend", id, "--for", "1h"}} {
		_, errOut, code := dibs(t, sockA, as(42003), try...)
		if code == 0 || !strings.Contains(errOut, `no account named "mallory"`) {
			t.Errorf("mallory's %s of carol's lease via node01: exit %d %q; want a refusal saying node02 has no mallory", try[0], code, errOut)
		}
	}
	_, errOut, code = dibs(t, sockA, as(42003), "run", "--node", "node02", "-g", "1", "--", "id")
	if code == 0 || !strings.Contains(errOut, `no account named "mallory"`) {
		t.Errorf("mallory's run on node02: exit %d %q; want a refusal (no session as carol)", code, errOut)
	}
	// dave is an admin on node01, not on node02: he cannot end carol's lease there.
	_, errOut, code = dibs(t, sockA, as(42004), "release", id)
	if code == 0 || !strings.Contains(errOut, "belongs to carol") {
		t.Errorf("dave (admin on node01 only) releasing carol's lease on node02: exit %d %q; want refused", code, errOut)
	}
	// On node01 itself dave is an admin: he can end a lease there.
	out, errOut, code = dibs(t, sockA, as(42003), "claim", "-g", "1", "--node", "node01", "--json")
	if code != 0 {
		t.Fatalf("mallory's own claim on node01: %s", errOut)
	}
	if _, errOut, code := dibs(t, sockA, as(42004), "release", jsonField(out, "id")); code != 0 {
		t.Errorf("dave, admin on node01, releasing mallory's lease there: %s", errOut)
	}
	// carol's lease is untouched.
	if o, _, _ := dibs(t, sockB, nil, "ls"); !strings.Contains(o, id) {
		t.Errorf("carol's lease is gone:\n%s", o)
	}
}

// jsonField pulls "key": "value" out of indented JSON.
func jsonField(js, key string) string {
	i := strings.Index(js, `"`+key+`": "`)
	if i < 0 {
		return ""
	}
	rest := js[i+len(key)+5:]
	return rest[:strings.IndexByte(rest, '"')]
}
