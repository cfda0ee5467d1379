package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// Replicas and rolling updates are tested on agents in network namespaces
// (separate hosts: each replica binds the same port on its own node), with
// python3 -m http.server as the service, serving a directory whose
// index.html says which version answers.

// nsCluster starts one agent per namespace of lab, under config cfg,
// and returns their sockets once every node sees every other alive.
func nsCluster(t *testing.T, lab *netLab, cfg string) []string {
	t.Helper()
	dir := agenttest.PublicDir(t)
	key := filepath.Join(dir, "cluster.key")
	if out, err := exec.Command(dibsBin, "keygen", key).CombinedOutput(); err != nil {
		t.Fatalf("keygen: %v %s", err, out)
	}
	cfgFile := filepath.Join(dir, "dibs.toml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	var joins []string
	for _, a := range lab.addrs {
		joins = append(joins, a+":7946")
	}
	socks := make([]string, len(lab.nodes))
	for i, ns := range lab.nodes {
		name := fmt.Sprintf("node0%d", i+1)
		// Each node its own run directory (socket, heartbeat) and tmux
		// directory, as separate hosts have.
		run := filepath.Join(dir, "run-"+name)
		if err := os.MkdirAll(run, 0o755); err != nil {
			t.Fatal(err)
		}
		socks[i] = filepath.Join(run, "dibs.sock")
		cmd := exec.Command("ip", "netns", "exec", ns, dibsBin, "agent", "--node-name", name, "--config", cfgFile,
			"--sim", "2xL40S", "--data-dir", filepath.Join(dir, name), "--socket", socks[i],
			"--bind", lab.addrs[i]+":7946", "--join", strings.Join(joins, ","),
			"--cluster-name", "lab", "--cluster-key-file", key)
		cmd.Env = append(os.Environ(), "TMUX_TMPDIR="+agenttest.TmuxDir(t))
		logf, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stdout, cmd.Stderr = logf, logf
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
			if t.Failed() {
				b, _ := os.ReadFile(logf.Name())
				t.Logf("%s log:\n%s", name, b)
			}
		})
	}
	agenttest.Eventually(t, 40*time.Second, "every node of the namespaces' cluster alive to every other", func() bool {
		for _, s := range socks {
			b, err := api.NewClient(s).Board(context.Background())
			if err != nil || len(b.Nodes) != len(socks) {
				return false
			}
			for _, n := range b.Nodes {
				if n.State != api.NodeAlive {
					return false
				}
			}
		}
		return true
	})
	return socks
}

// versionDir is a directory the service's user can read whose index.html
// says v.
func versionDir(t *testing.T, v string) string {
	t.Helper()
	d := filepath.Join(agenttest.PublicDir(t), v)
	if err := os.MkdirAll(d, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(d, "index.html"), []byte(v+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return d
}

// replicaURLs is `dibs url NAME`'s lines with each node's name swapped
// for its namespace's address, so a sampler inside node01's namespace
// reaches them.
func replicaURLs(t *testing.T, lab *netLab, out string) []string {
	t.Helper()
	var urls []string
	for _, line := range strings.Fields(out) {
		for i := range lab.nodes {
			line = strings.Replace(line, fmt.Sprintf("//node0%d:", i+1), "//"+lab.addrs[i]+":", 1)
		}
		urls = append(urls, line+"/")
	}
	return urls
}

func needServiceLab(t *testing.T) {
	t.Helper()
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("needs /usr/bin/python3 as the service (an HTTP server)")
	}
	agenttest.RequireTmux(t)
}

// TestReplicasSpreadAnswerUpdateAndStop: `dibs serve --replicas 2` on a
// two-node cluster puts one replica on each node (they share a port),
// both healthy, `dibs url` prints both and each answers; a third replica
// is refused in one line (only two nodes fit) and nothing of it is left;
// `dibs serve --update` from version A to B (no room beside the old, so
// each is stopped first and the gap said) ends with both answering B,
// and at every sample (each 50 ms) throughout one replica answered; an
// update to a command that never becomes healthy stops, exits non-zero
// and leaves B serving on both; `dibs stop` stops both.
func TestReplicasSpreadAnswerUpdateAndStop(t *testing.T) {
	needServiceLab(t)
	lab := newNetLab(t, 2)
	u := launchtest.User(t)
	socks := nsCluster(t, lab, "[leases]\nservice_gpus = 4\nservice_gpus_per_user = 4\n")
	dibs := func(args ...string) (string, string, int) {
		t.Helper()
		return dibsAs(t, u, "/usr/bin:/bin", socks[0], args...)
	}
	a, b := versionDir(t, "A"), versionDir(t, "B")
	serve := func(dir string) []string {
		return []string{"--", "/usr/bin/python3", "-m", "http.server", "8000", "--directory", dir}
	}
	get := agenttest.NetnsGet(lab.nodes[0])

	out, errOut, code := dibs(append([]string{"serve", "web", "-g", "1", "--replicas", "2", "--port", "8000", "--health", "/"}, serve(a)...)...)
	if code != 0 || !strings.Contains(out, "service web/0 started on") || !strings.Contains(out, "service web/1 started on") {
		t.Fatalf("serve --replicas 2: exit %d %q %q", code, out, errOut)
	}
	var rows []serviceRow
	agenttest.Eventually(t, 40*time.Second, "both replicas healthy in dibs services --json", func() bool {
		out, _, _ := dibs("services", "--json")
		rows = nil
		return json.Unmarshal([]byte(out), &rows) == nil && len(rows) == 2 && rows[0].State == "healthy" && rows[1].State == "healthy"
	})
	if rows[0].Replica != 0 || rows[1].Replica != 1 || rows[0].Node == rows[1].Node || rows[0].Session != "svc-web" || rows[1].Session != "svc1-web" {
		t.Fatalf("replicas: %+v, want 0 and 1 on two nodes in sessions svc-web and svc1-web", rows)
	}
	if out, _, _ := dibs("services"); !strings.Contains(out, "web/0") || !strings.Contains(out, "web/1") {
		t.Fatalf("dibs services names the replicas web/0 and web/1:\n%s", out)
	}
	out, errOut, code = dibs("url", "web")
	urls := replicaURLs(t, lab, out)
	if code != 0 || len(urls) != 2 {
		t.Fatalf("dibs url web: exit %d %q %q, want two lines", code, out, errOut)
	}
	for _, url := range urls {
		if body, ok := get(url); !ok || body != "A" {
			t.Fatalf("GET %s: %q %v, want A", url, body, ok)
		}
	}
	if out, _, code := dibs("url", "web/1"); code != 0 || strings.TrimSpace(out) != rows[1].URL {
		t.Fatalf("dibs url web/1: %q, want %s", out, rows[1].URL)
	}
	// Replica 1's log is its own (its node's), by NAME/1.
	agenttest.Eventually(t, 15*time.Second, "dibs logs web/1 to show replica 1's requests", func() bool {
		out, _, _ := dibs("logs", "web/1")
		return strings.Contains(out, `"GET / HTTP/1.1" 200`)
	})
	if out, errOut, code := dibs("logs", "web/2"); code == 0 || !strings.Contains(errOut, "svc2-web") {
		t.Fatalf("dibs logs web/2 (no such replica): exit %d %q %q, want a refusal naming the session it looked for", code, out, errOut)
	}

	// A third replica on the same port: two nodes fit, no more.
	out, errOut, code = dibs(append([]string{"serve", "api", "-g", "0", "--replicas", "3", "--port", "8001"}, serve(a)...)...)
	if code == 0 || strings.Count(strings.TrimSpace(errOut), "\n") > 0 || !strings.Contains(errOut, "--replicas 3 needs 3 nodes") || !strings.Contains(errOut, "2 fit") {
		t.Fatalf("serve --replicas 3 on two nodes: exit %d %q %q, want one line saying 3 nodes are needed and 2 fit", code, out, errOut)
	}
	agenttest.Eventually(t, 10*time.Second, "nothing of api left", func() bool {
		out, _, _ := dibs("services", "--json")
		return json.Unmarshal([]byte(out), &rows) == nil && len(rows) == 2 && !strings.Contains(out, `"api"`)
	})

	// Updates refused before anything is touched, each in one line.
	for _, c := range []struct {
		args []string
		want string
	}{
		{append([]string{"serve", "nope", "--update"}, serve(b)...), "you run no service named nope"},
		{append([]string{"serve", "web", "--update", "--replicas", "3"}, serve(b)...), "--update keeps the number of replicas (web runs 2)"},
		{append([]string{"serve", "web", "--update", "--json"}, serve(b)...), "--json does not go with --update"},
	} {
		out, errOut, code := dibs(c.args...)
		// With --json the refusal is JSON, as every command's is.
		oneLine := slices.Contains(c.args, "--json") || strings.Count(strings.TrimSpace(errOut), "\n") == 0
		if code == 0 || !oneLine || !strings.Contains(errOut, c.want) {
			t.Fatalf("dibs %s: exit %d %q %q, want one line saying %q", strings.Join(c.args[:4], " "), code, out, errOut, c.want)
		}
	}

	// Update A -> B, sampled throughout from node01's namespace.
	s := agenttest.StartSampling(t, urls, 50*time.Millisecond, get)
	began := time.Now()
	out, errOut, code = dibs(append([]string{"serve", "web", "--update"}, serve(b)...)...)
	took := time.Since(began)
	rep := s.Stop()
	if code != 0 || !strings.Contains(out, "service web updated") || !strings.Contains(out, "no room for a new replica beside the old") || !strings.Contains(out, "runs on 1 of 2 replicas meanwhile") {
		t.Fatalf("update: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("update A -> B (stop-then-start) took %s:\n%s%d samples, bodies %v", took.Round(10*time.Millisecond), out, rep.Samples, rep.Bodies)
	if len(rep.Empty) > 0 || rep.Samples < 10 || rep.Bodies["B"] == 0 {
		t.Fatalf("sampled during the update: %d samples, %d with no replica answering (first at %s), bodies %v", rep.Samples, len(rep.Empty), rep.Empty, rep.Bodies)
	}
	agenttest.Eventually(t, 20*time.Second, "both replicas answer B", func() bool {
		for _, url := range urls {
			if body, ok := get(url); !ok || body != "B" {
				return false
			}
		}
		return true
	})

	// An update to a command that never becomes healthy stops, and the
	// old command (B) serves on both replicas.
	s = agenttest.StartSampling(t, urls, 50*time.Millisecond, get)
	out, errOut, code = dibs("serve", "web", "--update", "--wait", "4s", "--", "/bin/sleep", "600")
	rep = s.Stop()
	if code == 0 || !strings.Contains(errOut, "was not healthy within --wait 4s") || !strings.Contains(out, "web/0: the old command") || !strings.Contains(out, "web/1: the old command") {
		t.Fatalf("update to a command never healthy: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("failed update:\n%s%s%d samples, bodies %v", out, errOut, rep.Samples, rep.Bodies)
	if len(rep.Empty) > 0 {
		t.Fatalf("sampled during the failed update: %d of %d samples with no replica answering", len(rep.Empty), rep.Samples)
	}
	agenttest.Eventually(t, 30*time.Second, "both replicas answer B again, healthy", func() bool {
		out, _, _ := dibs("services", "--json")
		if json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 || rows[0].State != "healthy" || rows[1].State != "healthy" {
			return false
		}
		for _, url := range urls {
			if body, ok := get(url); !ok || body != "B" {
				return false
			}
		}
		return true
	})

	out, errOut, code = dibs("stop", "web")
	if code != 0 || !strings.Contains(out, "service web, 2 replicas, stopped") {
		t.Fatalf("dibs stop web: exit %d %q %q", code, out, errOut)
	}
	if out, _, _ := dibs("services", "--json"); strings.TrimSpace(out) != "[]" {
		t.Fatalf("services after stop: %s", out)
	}
	agenttest.Eventually(t, 10*time.Second, "neither replica answers after stop", func() bool {
		return !slices.ContainsFunc(urls, func(url string) bool { _, ok := get(url); return ok })
	})
}

// TestReplicasRollingUpdateSurgesWhereANodeHasRoom: two replicas on a
// port on a three-node cluster leave a node free, so `dibs serve
// --update` starts each new replica beside the old one (surge) and stops
// the old once the new is healthy: sampling every node's address each
// 50 ms, a replica answered at every sample, and the update ends with
// two replicas answering B on two nodes. An update whose new replica is
// never healthy stops it and never touches the old ones.
func TestReplicasRollingUpdateSurgesWhereANodeHasRoom(t *testing.T) {
	needServiceLab(t)
	lab := newNetLab(t, 3)
	u := launchtest.User(t)
	socks := nsCluster(t, lab, "[leases]\nservice_gpus = 6\nservice_gpus_per_user = 4\n")
	dibs := func(args ...string) (string, string, int) {
		t.Helper()
		return dibsAs(t, u, "/usr/bin:/bin", socks[0], args...)
	}
	a, b := versionDir(t, "A"), versionDir(t, "B")
	serve := func(dir string) []string {
		return []string{"--", "/usr/bin/python3", "-m", "http.server", "8000", "--directory", dir}
	}
	get := agenttest.NetnsGet(lab.nodes[0])
	var every []string
	for _, addr := range lab.addrs {
		every = append(every, "http://"+addr+":8000/")
	}
	healthy := func(want string) []serviceRow {
		var rows []serviceRow
		agenttest.Eventually(t, 40*time.Second, "two replicas healthy answering "+want, func() bool {
			out, _, _ := dibs("services", "--json")
			if json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 || rows[0].State != "healthy" || rows[1].State != "healthy" {
				return false
			}
			for _, url := range replicaURLs(t, lab, rows[0].URL+" "+rows[1].URL) {
				if body, ok := get(url); !ok || body != want {
					return false
				}
			}
			return true
		})
		return rows
	}

	if out, errOut, code := dibs(append([]string{"serve", "web", "-g", "1", "--replicas", "2", "--port", "8000", "--health", "/"}, serve(a)...)...); code != 0 {
		t.Fatalf("serve --replicas 2: exit %d %q %q", code, out, errOut)
	}
	before := healthy("A")

	s := agenttest.StartSampling(t, every, 50*time.Millisecond, get)
	began := time.Now()
	out, errOut, code := dibs(append([]string{"serve", "web", "--update"}, serve(b)...)...)
	took := time.Since(began)
	rep := s.Stop()
	if code != 0 || strings.Contains(out, "no room") || strings.Count(out, "beside the old") != 2 || !strings.Contains(out, "service web updated") {
		t.Fatalf("update with a free node: exit %d, want two replicas started beside the old\n%s\n%s", code, out, errOut)
	}
	t.Logf("update A -> B (surge) took %s:\n%s%d samples, bodies %v", took.Round(10*time.Millisecond), out, rep.Samples, rep.Bodies)
	if len(rep.Empty) > 0 || rep.Samples < 10 || rep.Bodies["B"] == 0 {
		t.Fatalf("sampled during the update: %d samples, %d with no replica answering, bodies %v", rep.Samples, len(rep.Empty), rep.Bodies)
	}
	after := healthy("B")
	if after[0].Node == after[1].Node || after[0].Lease == before[0].Lease || after[1].Lease == before[1].Lease {
		t.Fatalf("after the update: %+v (before %+v), want two new leases on two nodes", after, before)
	}

	// A new replica never healthy: stopped, the old ones untouched.
	s = agenttest.StartSampling(t, every, 50*time.Millisecond, get)
	out, errOut, code = dibs("serve", "web", "--update", "--wait", "3s", "--", "/bin/sleep", "600")
	rep = s.Stop()
	if code == 0 || !strings.Contains(errOut, "web/0: the new replica was not healthy within --wait 3s") || !strings.Contains(errOut, "keeps serving") {
		t.Fatalf("update to a command never healthy: exit %d\n%s\n%s", code, out, errOut)
	}
	if len(rep.Empty) > 0 || rep.Bodies["B"] != rep.Samples {
		t.Fatalf("sampled during the failed update: %d samples, %d empty, bodies %v: want B at every one", rep.Samples, len(rep.Empty), rep.Bodies)
	}
	if still := healthy("B"); still[0].Lease != after[0].Lease || still[1].Lease != after[1].Lease {
		t.Fatalf("a failed surge touched the old replicas: %+v, were %+v", still, after)
	}

	// Ctrl-C while web/0's new replica starts: the update finishes web/0,
	// stops before web/1, says which runs what, and exits non-zero.
	c := versionDir(t, "C")
	cmd := exec.Command(dibsBin, append([]string{"--socket", socks[0], "serve", "web", "--update"}, serve(c)...)...)
	cmd.Dir, cmd.Env = u.Home, []string{"HOME=" + u.Home, "USER=" + u.Name, "LANG=C.UTF-8", "PATH=/usr/bin:/bin"}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.UID), Gid: uint32(u.GID)}}
	var stdout, stderr syncBuffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	agenttest.Eventually(t, 20*time.Second, "the update to start web/0's new replica", func() bool {
		return strings.Contains(stdout.String(), "web/0: new replica")
	})
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	if err == nil || !strings.Contains(stderr.String(), "interrupted before web/1: 1 of 2 replicas run the new command") ||
		!strings.Contains(stdout.String(), "web/0: the new command") || !strings.Contains(stdout.String(), "web/1: the old command") {
		t.Fatalf("update interrupted: %v\n%s\n%s", err, stdout.String(), stderr.String())
	}
	agenttest.Eventually(t, 20*time.Second, "web/0 answering C and web/1 B", func() bool {
		out, _, _ := dibs("services", "--json")
		var rows []serviceRow
		if json.Unmarshal([]byte(out), &rows) != nil || len(rows) != 2 {
			return false
		}
		b0, ok0 := get(replicaURLs(t, lab, rows[0].URL)[0])
		b1, ok1 := get(replicaURLs(t, lab, rows[1].URL)[0])
		return ok0 && ok1 && b0 == "C" && b1 == "B"
	})
}

// TestRollingUpdateThroughTheProxyNeverLeavesTheAddressWithoutAReplica:
// with the services proxy on, two replicas on two nodes answer on one
// proxy port on every node; `dibs serve --update` from A to B (each
// replica stopped, then started: no room beside the old) is sampled every
// 50 ms through both nodes' proxies, and the proxy address answered at
// every sample, B by the end.
func TestRollingUpdateThroughTheProxyNeverLeavesTheAddressWithoutAReplica(t *testing.T) {
	needServiceLab(t)
	lab := newNetLab(t, 2)
	u := launchtest.User(t)
	socks := nsCluster(t, lab, "[leases]\nservice_gpus = 4\n[services]\nproxy = true\nproxy_ports = \"30000-30009\"\n")
	dibs := func(args ...string) (string, string, int) {
		t.Helper()
		return dibsAs(t, u, "/usr/bin:/bin", socks[0], args...)
	}
	a, b := versionDir(t, "A"), versionDir(t, "B")
	serve := func(dir string) []string {
		return []string{"--", "/usr/bin/python3", "-m", "http.server", "8000", "--directory", dir}
	}
	get := agenttest.NetnsGet(lab.nodes[0])
	if out, errOut, code := dibs(append([]string{"serve", "web", "-g", "1", "--replicas", "2", "--port", "8000", "--health", "/"}, serve(a)...)...); code != 0 {
		t.Fatalf("serve --replicas 2: exit %d %q %q", code, out, errOut)
	}
	var rows []serviceRow
	agenttest.Eventually(t, 40*time.Second, "both replicas healthy with a proxy port", func() bool {
		out, _, _ := dibs("services", "--json")
		return json.Unmarshal([]byte(out), &rows) == nil && len(rows) == 2 && rows[0].State == "healthy" && rows[1].State == "healthy" &&
			rows[0].ProxyPort != 0 && rows[0].ProxyPort == rows[1].ProxyPort
	})
	var proxies []string
	for _, addr := range lab.addrs {
		proxies = append(proxies, fmt.Sprintf("http://%s:%d/", addr, rows[0].ProxyPort))
	}
	agenttest.Eventually(t, 20*time.Second, "A through both nodes' proxies", func() bool {
		for _, p := range proxies {
			if body, ok := get(p); !ok || body != "A" {
				return false
			}
		}
		return true
	})
	// Each proxy sampled on its own: each address must answer throughout.
	s0 := agenttest.StartSampling(t, proxies[:1], 50*time.Millisecond, get)
	s1 := agenttest.StartSampling(t, proxies[1:], 50*time.Millisecond, get)
	out, errOut, code := dibs(append([]string{"serve", "web", "--update"}, serve(b)...)...)
	r0, r1 := s0.Stop(), s1.Stop()
	if code != 0 || !strings.Contains(out, "service web updated") {
		t.Fatalf("update: exit %d\n%s\n%s", code, out, errOut)
	}
	t.Logf("update through the proxy:\n%snode01's proxy: %d samples, bodies %v; node02's: %d samples, bodies %v", out, r0.Samples, r0.Bodies, r1.Samples, r1.Bodies)
	for i, r := range []agenttest.SamplingReport{r0, r1} {
		if len(r.Empty) > 0 || r.Samples < 10 {
			t.Errorf("node0%d's proxy during the update: %d samples, %d without an answer (first at %v), bodies %v", i+1, r.Samples, len(r.Empty), r.Empty, r.Bodies)
		}
	}
	agenttest.Eventually(t, 20*time.Second, "B through both nodes' proxies", func() bool {
		for _, p := range proxies {
			if body, ok := get(p); !ok || body != "B" {
				return false
			}
		}
		return true
	})
}

// TestUpdateOfReplicasWithoutAPortSurgesOnOneNode: replicas without a port
// share a node, and an update starts each new one beside the old on that
// node, in the session's other name (svcu-NAME, svc1u-NAME), then back
// (svc-NAME, svc1-NAME) at the next update; `dibs logs NAME/i` follows the
// replica to its session.
func TestUpdateOfReplicasWithoutAPortSurgesOnOneNode(t *testing.T) {
	agenttest.RequireTmux(t)
	u := launchtest.User(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	p := startAgent(t, agenttest.PublicDir(t), "--sim", "2xL40S")
	dibs := func(args ...string) (string, string, int) {
		t.Helper()
		return dibsAs(t, u, "/usr/bin:/bin", p.socket, args...)
	}
	say := func(v string) []string {
		return []string{"--", "/bin/sh", "-c", "echo version " + v + "; exec sleep 600"}
	}
	healthy := func(sessions ...string) {
		t.Helper()
		agenttest.Eventually(t, 30*time.Second, "replicas healthy in sessions "+strings.Join(sessions, ", "), func() bool {
			out, _, _ := dibs("services", "--json")
			var rows []serviceRow
			if json.Unmarshal([]byte(out), &rows) != nil || len(rows) != len(sessions) {
				return false
			}
			for i, r := range rows {
				if r.State != "healthy" || r.Session != sessions[i] {
					return false
				}
			}
			return true
		})
	}
	if out, errOut, code := dibs(append([]string{"serve", "tick", "-g", "0", "--replicas", "2"}, say("A")...)...); code != 0 {
		t.Fatalf("serve --replicas 2 without a port: exit %d %q %q", code, out, errOut)
	}
	healthy("svc-tick", "svc1-tick")
	for _, c := range []struct{ v, s0, s1 string }{{"B", "svcu-tick", "svc1u-tick"}, {"C", "svc-tick", "svc1-tick"}} {
		out, errOut, code := dibs(append([]string{"serve", "tick", "--update"}, say(c.v)...)...)
		if code != 0 || strings.Count(out, "beside the old") != 2 {
			t.Fatalf("update to %s: exit %d, want both replicas started beside the old\n%s\n%s", c.v, code, out, errOut)
		}
		healthy(c.s0, c.s1)
		for _, ref := range []string{"tick", "tick/1"} {
			agenttest.Eventually(t, 15*time.Second, "dibs logs "+ref+" to say version "+c.v, func() bool {
				out, _, _ := dibs("logs", ref)
				return strings.Contains(out, "version "+c.v)
			})
		}
	}
}
