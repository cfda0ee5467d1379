package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/dibs-gpu/dibs/agent/agenttest"
)

// TestConfigCheckClusterKey runs `dibs config check` on configs whose
// cluster key is missing, too open, unreadable, malformed or fine, and
// checks the one line a person gets for each, and what a good config
// turns on.
func TestConfigCheckClusterKey(t *testing.T) {
	dir := agenttest.PublicDir(t)
	key := filepath.Join(dir, "cluster.key")
	conf := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	smallest := conf("smallest.toml", "[cluster]\nkey_file = \""+key+"\"\njoin = [\"10.0.0.1\", \"10.0.0.2\"]\n")
	check := func(path string, cred *syscall.Credential) (string, string, int) {
		return dibs(t, filepath.Join(dir, "none.sock"), cred, "config", "check", path)
	}
	wantErr := func(name, path, want string, cred *syscall.Credential) {
		t.Helper()
		out, e, code := check(path, cred)
		if code == 0 || e != "dibs: "+path+": "+want+"\n" || out != "" {
			t.Errorf("%s: exit %d, stdout %q, stderr %q; want exit 1 and %q", name, code, out, e, want)
		}
	}

	wantErr("no key yet", smallest, "no cluster key at "+key+": make it once, on one node, with `dibs keygen "+key+"`, then copy it to every node (mode 0600)", nil)
	if _, e, code := dibs(t, filepath.Join(dir, "none.sock"), nil, "keygen", key); code != 0 {
		t.Fatalf("keygen: %s", e)
	}
	out, e, code := check(smallest, nil)
	if code != 0 {
		t.Fatalf("check of a good config: exit %d: %s", code, e)
	}
	host, _ := os.Hostname()
	for _, want := range []string{
		smallest + ": ok\n",
		"node       " + host + " (the host name)\n",
		`cluster    "dibs" (the default name; every node must have the same)` + "\n",
		"key        " + key + " (read, mode 0600)\n",
		"join       10.0.0.1 10.0.0.2\n",
		"gossip     every address:7946, TCP and UDP (open it between the nodes)\n",
		"ssh board  off\n",
		"metrics    off\n",
		"proxy      off\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("check of a good config lacks %q:\n%s", want, out)
		}
	}
	full := conf("full.toml", "node_name = \"gpu1\"\n[cluster]\nname = \"lab\"\nkey_file = \""+key+"\"\n[ssh]\nlisten = \":2222\"\n")
	if out, e, _ := check(full, nil); !strings.Contains(out, "node       gpu1\n") || !strings.Contains(out, `cluster    "lab"`+"\n") ||
		!strings.Contains(out, "ssh board  :2222, TCP (open it to the people who use the board: ssh -p 2222 NODE)\n") {
		t.Errorf("check of a config with a name and the SSH board: %q %q", out, e)
	}

	proxied := conf("proxy.toml", "[cluster]\nkey_file = \""+key+"\"\n[services]\nproxy = true\n")
	if out, e, _ := check(proxied, nil); !strings.Contains(out, "proxy      every address, ports 30000-30099, TCP (open the range between the nodes and to the services' clients;") {
		t.Errorf("check of a config with the services proxy on: %q %q", out, e)
	}
	one := conf("proxy1.toml", "[services]\nproxy = true\nproxy_ports = \"30000-30000\"\n")
	if out, e, code := check(one, nil); code == 0 || out != "" || e != "dibs: "+one+":3: services.proxy_ports: 30000-30000 must be FIRST-LAST with 1 <= FIRST < LAST <= 65535 (the first port is the agents' backend, the rest the services')\n" {
		t.Errorf("a proxy range of one port: exit %d, stdout %q, stderr %q; want one line naming the key and its line", code, out, e)
	}

	os.Chmod(key, 0o644)
	wantErr("key readable by all", smallest, "the cluster key "+key+" is mode 0644: whoever reads it can act as anyone on every node; chmod 600 "+key, nil)
	os.Chmod(key, 0o600)

	wantErr("no key_file", conf("nokey.toml", "[cluster]\njoin = [\"10.0.0.1\"]\n"),
		"[cluster] has no key_file, and the agent will not gossip unencrypted: make a key with `dibs keygen /etc/dibs/cluster.key` and add key_file = \"/etc/dibs/cluster.key\" under [cluster]", nil)
	bad := filepath.Join(dir, "bad.key")
	os.WriteFile(bad, []byte("not a key\n"), 0o600)
	wantErr("malformed key", conf("badkey.toml", "[cluster]\nkey_file = \""+bad+"\"\n"),
		"read cluster key "+bad+": key is neither 32 raw bytes nor their base64 text (10 bytes given): make one with `dibs keygen`", nil)
	unknown := conf("unknown.toml", "[cluster]\nkey_file = \""+key+"\"\njoin = [\"localhost\", \"no-such-node.invalid:7946\"]\n")
	wantErr("a join name that does not resolve", unknown,
		"[cluster] join names no-such-node.invalid, which does not resolve on this node: add it to DNS or to /etc/hosts on every node (or give its address)", nil)
	if out, _, code := check(conf("alone.toml", "node_name = \"solo\"\n"), nil); code != 0 || !strings.Contains(out, "cluster    off: this agent runs alone") {
		t.Errorf("check of a config without [cluster]: exit %d %q", code, out)
	}
	// A loopback bind or join checks (one node can run so) but warns: no
	// other node can reach it, so no cluster forms (issue 30).
	loop := conf("loopback.toml", "[cluster]\nkey_file = \""+key+"\"\nbind = \"127.0.0.1\"\njoin = [\"127.0.0.1\"]\n")
	if out, e, code := check(loop, nil); code != 0 || !strings.Contains(out, loop+": ok\n") ||
		!strings.Contains(e, "dibs: warning: "+loop+": [cluster] bind = \"127.0.0.1\" is a loopback address, which no other node can reach") ||
		!strings.Contains(e, "dibs: warning: "+loop+": [cluster] join lists \"127.0.0.1\", a loopback address") {
		t.Errorf("check of a loopback config: exit %d, stdout %q, stderr %q; want ok and a warning for bind and for join", code, out, e)
	}
	if _, e, _ := check(smallest, nil); e != "" {
		t.Errorf("check of a good config warns: %q", e)
	}

	if os.Geteuid() != 0 {
		t.Log("not root: the key's owner and reading it as another user are not checked")
		return
	}
	nobody := &syscall.Credential{Uid: 65534, Gid: 65534}
	wantErr("key readable by root only, checked as nobody", smallest, "cannot read the cluster key "+key+" as uid 65534: run `sudo dibs config check`, as the agent reads it as root", nobody)
	os.Chown(key, 65534, 65534)
	wantErr("key owned by someone else", smallest, "the cluster key "+key+" belongs to uid 65534, who can change it: chown root "+key, nil)
	os.Chown(key, 0, 0)
}
