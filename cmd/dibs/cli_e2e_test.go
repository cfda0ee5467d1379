package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// The CLI as a SLURM user expects it: -g/--gpus is a count (srun --gpus),
// --ids names GPUs (nvidia-smi -i), and what it says reads right.
func TestCLIGpusIsACountAndIdsNamesGPUs(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "4xL40S")
	// Times left read "4h" or "3h59m" depending on the second the test
	// runs in: stderr is matched as a pattern.
	left := `(4h|3h59m)`
	tests := []struct {
		name   string
		args   []string
		code   int
		stdout string
		stderr string // a regexp
		never  string
	}{
		// stdout is a pipe: it holds only the shell line, the sentence is on stderr.
		{"-g is a count", []string{"claim", "-g", "2"}, 0, "export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=0,1 DIBS_LEASE_ID=node01-1\n", "^node01-1: GPUs 0,1 on node01 until", ""},
		{"--gpus is the same count, and one GPU is singular", []string{"claim", "--gpus", "1"}, 0, "export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=2 DIBS_LEASE_ID=node01-2\n", "^node01-2: GPU 2 on node01 until", ""},
		{"--ids names GPUs", []string{"claim", "--ids", "3"}, 0, "export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=3 DIBS_LEASE_ID=node01-3\n", "^node01-3: GPU 3 on node01 until", ""},
		{"indices given to -g say to use --ids", []string{"claim", "-g", "0,2"}, 1, "", regexp.QuoteMeta("dibs: -g/--gpus takes a count, as in srun --gpus 2; name particular GPUs with --ids 0,2"), ""},
		{"bad --ids", []string{"claim", "--ids", "x"}, 1, "", regexp.QuoteMeta(`--ids "x": give GPU indices like 0,2`), ""},
		{"nothing said", []string{"claim"}, 1, "", regexp.QuoteMeta("say how many GPUs (-g 2), which (--ids 0,2), a MIG instance (--mig 3g.40gb) or a memory budget (--mem 20G)"), ""},
		{"a refusal of one GPU says GPU, and you, not your name", []string{"claim", "-g", "1"}, 1, "",
			`asked for 1 GPU but only 0 free on node01: you hold GPUs 0,1 for ` + left + ` more; you hold GPU 2 for ` + left + ` more; you hold GPU 3 for ` + left + ` more; release what you hold there, or wait`, "holds"},
		{"a named GPU of your own", []string{"claim", "--ids", "1"}, 1, "", `you already hold GPU 1 for ` + left + ` more \(lease node01-1,`, "is held by"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := dibs(t, p.socket, nil, tc.args...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stdout %q stderr %q", code, tc.code, out, errOut)
			}
			if tc.code == 0 && out != tc.stdout || tc.code != 0 && out != "" || !regexp.MustCompile(tc.stderr).MatchString(errOut) {
				t.Errorf("stdout %q stderr %q; want %q and /%s/", out, errOut, tc.stdout, tc.stderr)
			}
			if tc.never != "" && strings.Contains(out+errOut, tc.never) {
				t.Errorf("output %q says %q", out+errOut, tc.never)
			}
		})
	}
	// --count still works for old scripts, with a warning, and is not in
	// the help.
	dibs(t, p.socket, nil, "release", "node01-3")
	out, errOut, code := dibs(t, p.socket, nil, "claim", "--count", "1")
	if code != 0 || !strings.Contains(errOut, "GPU 3 on node01") || !strings.Contains(out, "CUDA_VISIBLE_DEVICES=3 ") || !strings.Contains(errOut, "--count has been deprecated, use -g/--gpus N") {
		t.Errorf("claim --count 1: exit %d %q %q", code, out, errOut)
	}
	help, _, _ := dibs(t, p.socket, nil, "claim", "--help")
	if strings.Contains(help, "--count") || !strings.Contains(help, "-g, --gpus int") || !strings.Contains(help, "--ids IDS") {
		t.Errorf("claim --help:\n%s", help)
	}
}

// TestCLIWhoSaysOverLikeLs: a lease past its end that the end action keeps
// (warn) reads "over" in `who` as in `ls`, never a negative time.
func TestCLIWhoSaysOverLikeLs(t *testing.T) {
	dir := agenttest.PublicDir(t)
	conf := filepath.Join(dir, "dibs.toml")
	os.WriteFile(conf, []byte("[leases]\nend_action = \"warn\"\n"), 0o644)
	p := startAgent(t, dir, "--sim", "2xL40S", "--config", conf)
	if _, e, c := dibs(t, p.socket, nil, "claim", "-g", "1", "--for", "1s", "--note", "short"); c != 0 {
		t.Fatal(e)
	}
	var ls, who string
	agenttest.Eventually(t, 10*time.Second, "the lease to be past its end", func() bool {
		ls, _, _ = dibs(t, p.socket, nil, "ls")
		return strings.Contains(ls, "over")
	})
	who, _, _ = dibs(t, p.socket, nil, "who")
	row := regexp.MustCompile(`(?m)^\S+\s+node01-1\s+node01:0\s+(\S+)\s+short$`).FindStringSubmatch(who)
	if row == nil || row[1] != "over" {
		t.Errorf("who says %q, want the lease's time left as \"over\", as ls says:\n%s\nls:\n%s", row, who, ls)
	}
	if regexp.MustCompile(`\s-\d`).MatchString(who) {
		t.Errorf("who shows a negative time:\n%s", who)
	}
}

// TestCLISessionNameErrorReadsOnce: a bad --name is refused in one line
// that says what is wrong once.
func TestCLISessionNameErrorReadsOnce(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "1xL40S")
	_, errOut, code := dibs(t, p.socket, nil, "run", "-g", "1", "--name", "a:b", "--", "true")
	if code == 0 {
		t.Fatal("run --name a:b was accepted")
	}
	want := `dibs: invalid session name "a:b": use 1-128 letters, digits, '_' and '-', not starting with '-' (tmux rewrites '.' and ':')` + "\n"
	if errOut != want {
		t.Errorf("stderr = %q\nwant     %q", errOut, want)
	}
}

// TestFlagPlaceholdersAreOneWord: pflag takes the first `quoted` word of a
// flag's usage as its argument's name in --help; a quoted command there
// (`dibs keygen FILE`) once became the placeholder.
func TestFlagPlaceholdersAreOneWord(t *testing.T) {
	c := &cli{stdout: &bytes.Buffer{}, stderr: &bytes.Buffer{}}
	var walk func(cmd *cobra.Command)
	walk = func(cmd *cobra.Command) {
		cmd.Flags().VisitAll(func(f *pflag.Flag) {
			name, _ := pflag.UnquoteUsage(f)
			if strings.ContainsAny(name, " `") {
				t.Errorf("%s --%s shows its argument as %q in --help: quote one word of its usage, or none", cmd.CommandPath(), f.Name, name)
			}
		})
		for _, sub := range cmd.Commands() {
			walk(sub)
		}
	}
	walk(rootCmd(c))
	out, _, _ := dibs(t, "/nonexistent.sock", nil, "agent", "--help")
	if !regexp.MustCompile(`--cluster-key-file FILE\s+FILE holding the cluster key \(make one with: dibs keygen FILE\)`).MatchString(out) {
		t.Errorf("agent --help does not show --cluster-key-file FILE:\n%s", out)
	}
}

// TestCLIQueueJSONMatchesTable: `dibs queue --json` carries the position
// and the priority the table shows.
func TestCLIQueueJSONMatchesTable(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "1xL40S")
	if _, e, c := dibs(t, p.socket, nil, "claim", "-g", "1", "--for", "1h"); c != 0 {
		t.Fatal(e)
	}
	for range 2 {
		if out, e, c := dibs(t, p.socket, nil, "run", "--queue", "-g", "1", "--", "true"); c != 0 || !strings.Contains(out, "queued") {
			t.Fatalf("run --queue: %q %q", out, e)
		}
	}
	table, _, _ := dibs(t, p.socket, nil, "queue")
	js, _, _ := dibs(t, p.socket, nil, "queue", "--json")
	var q api.Queue
	if err := json.Unmarshal([]byte(js), &q); err != nil || len(q.Entries) != 2 {
		t.Fatalf("queue --json: %v\n%s", err, js)
	}
	// Why each waits, named: the first for the lease on the GPU, the
	// second for the first; the words whole into a pipe (never cut with
	// ~), the codes in the JSON, every node's reason with -v.
	if !regexp.MustCompile(`next to start: GPU 0 of \S+ is held by root's lease \S+ for 1h more\n`).MatchString(table) ||
		!regexp.MustCompile(`GPU 0 of \S+ goes first to \S+-q1, submitted before it at the same priority\n`).MatchString(table) || strings.Contains(table, "~") {
		t.Errorf("queue does not say why each waits, whole:\n%s", table)
	}
	if r := q.Entries[0].Reason; r == nil || r.Code != queue.WaitHeld || len(q.Entries[0].NodeReasons) != 1 {
		t.Errorf("queue --json: the first's reason %+v, node reasons %+v; want held, one node's", r, q.Entries[0].NodeReasons)
	}
	if r := q.Entries[1].Reason; r == nil || r.Code != queue.WaitOrder {
		t.Errorf("queue --json: the second's reason %+v, want order", r)
	}
	if v, _, _ := dibs(t, p.socket, nil, "queue", "-v"); !regexp.MustCompile(`(?m)^      \S+ order: GPU 0 of`).MatchString(v) {
		t.Errorf("queue -v lists no node's reason:\n%s", v)
	}
	for _, e := range q.Entries {
		m := regexp.MustCompile(`(?m)^(\S+)\s+` + regexp.QuoteMeta(e.ID) + `\s+root\s+1\s+4h\s+(\S+)\s`).FindStringSubmatch(table)
		if m == nil {
			t.Fatalf("no row for %s in:\n%s", e.ID, table)
		}
		if m[1] != strconv.Itoa(e.Position) || m[2] != fmt.Sprintf("%.0f", e.Priority) {
			t.Errorf("%s: table says position %s priority %s; JSON says %d and %v", e.ID, m[1], m[2], e.Position, e.Priority)
		}
		if e.Priority != math.Trunc(e.Priority) {
			t.Errorf("%s: JSON priority %v is not the whole number the table shows", e.ID, e.Priority)
		}
	}
}

// TestCLIQueuedRequestThatStartsAtOnceSaysSo: run --queue and claim --queue
// on a free node start at once and say so, not "queued … position 1".
func TestCLIQueuedRequestThatStartsAtOnceSaysSo(t *testing.T) {
	agenttest.RequireTmux(t)
	dir := agenttest.PublicDir(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	p := startAgent(t, dir, "--sim", "2xL40S")

	out, errOut, code := dibs(t, p.socket, nil, "run", "--queue", "-g", "1", "--", "sleep", "30")
	if code != 0 || !strings.Contains(out, "started node01-q1 at once") || !strings.Contains(out, "session dibs-node01-1 started on node01") || strings.Contains(out, "queued") {
		t.Errorf("run --queue on a free node: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = dibs(t, p.socket, nil, "run", "--queue", "-g", "1", "--json", "--", "sleep", "30")
	var started struct {
		ID       string              `json:"id"`
		Position int                 `json:"position"`
		Started  bool                `json:"started"`
		Leases   []api.ClaimResponse `json:"leases"`
	}
	if err := json.Unmarshal([]byte(out), &started); code != 0 || err != nil || !started.Started || started.Position != 0 || len(started.Leases) != 1 || started.Leases[0].Session != "dibs-node01-2" {
		t.Errorf("run --queue --json on a free node = %+v (%v, exit %d): want started with its lease\n%s%s", started, err, code, out, errOut)
	}
	dibs(t, p.socket, nil, "release", "node01-2")
	out, errOut, code = dibs(t, p.socket, nil, "claim", "--queue", "-g", "1")
	if code != 0 || !strings.Contains(errOut, "node01-3: GPU 1 on node01") || out != "export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=1 DIBS_LEASE_ID=node01-3\n" || strings.Contains(errOut, "waiting") {
		t.Errorf("claim --queue on a free node: exit %d, stdout %q, stderr %q (want the grant, no waiting line)", code, out, errOut)
	}
	// With nothing free it waits, and says so.
	out, _, code = dibs(t, p.socket, nil, "run", "--queue", "-g", "1", "--json", "--", "true")
	var s struct {
		ID       string `json:"id"`
		Position int    `json:"position"`
		Started  bool   `json:"started"`
	}
	if err := json.Unmarshal([]byte(out), &s); code != 0 || err != nil || s.Started || s.Position != 1 {
		t.Errorf("run --queue --json with nothing free = %+v (%v): want position 1, not started\n%s", s, err, out)
	}
}

// TestCompletionsAskTheAgent: Tab after release, cancel, --node and --kind
// offers what the agent knows, the caller's own leases and requests only;
// with no agent it offers nothing and says nothing.
func TestCompletionsAskTheAgent(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "4xL40S")
	if _, e, c := dibs(t, p.socket, nil, "claim", "-g", "1", "--note", "mine"); c != 0 {
		t.Fatal(e)
	}
	// A second user's lease (root runs a client as nobody) must not be
	// offered to the first.
	var other string
	if os.Geteuid() == 0 {
		if nobody, err := user.Lookup("nobody"); err == nil {
			uid, _ := strconv.Atoi(nobody.Uid)
			gid, _ := strconv.Atoi(nobody.Gid)
			out, e, c := dibs(t, p.socket, &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, "claim", "-g", "1", "--json")
			if c != 0 {
				t.Fatalf("nobody's claim: %s", e)
			}
			var r api.ClaimResponse
			json.Unmarshal([]byte(out), &r)
			other = r.ID
		}
	}
	if _, e, c := dibs(t, p.socket, nil, "claim", "-g", "2"); c != 0 {
		t.Fatal(e)
	}
	if _, e, c := dibs(t, p.socket, nil, "run", "--queue", "-g", "1", "--", "true"); c != 0 {
		t.Fatal(e)
	}
	// A booking two days ahead is offered after unbook, and nowhere else.
	day := time.Now().Add(48 * time.Hour).Format("2006-01-02")
	bout, e, c := dibs(t, p.socket, nil, "book", "-g", "1", "--at", day+" 09:00", "--for", "2h", "--note", "later", "--json")
	var bk lease.Lease
	if err := json.Unmarshal([]byte(bout), &bk); c != 0 || err != nil {
		t.Fatalf("book: exit %d, %v: %s%s", c, err, bout, e)
	}
	booked := fmt.Sprintf("%s\tGPU %s on node01 from %s for 2h: later\n", bk.ID, bk.CUDAVisibleDevices(), bk.StartedAt.Local().Format("Mon Jan 2 15:04"))
	// Time left reads 4h or 3h59m depending on the second: say "T".
	leftRE := regexp.MustCompile(`(4h|3h59m) left`)
	complete := func(args ...string) string {
		out, errOut, code := dibs(t, p.socket, nil, append([]string{"__complete"}, args...)...)
		if code != 0 {
			t.Fatalf("__complete %q: exit %d %s", args, code, errOut)
		}
		return leftRE.ReplaceAllString(out, "T left")
	}
	second := "node01-3\tGPUs 2,3 on node01, T left\n"
	if other == "" {
		second = "node01-2\tGPUs 1,2 on node01, T left\n"
	}
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"release", ""}, "node01-1\tGPU 0 on node01, T left: mine\n" + second + ":4\n"},
		{[]string{"release", "node01-1", ""}, second + ":4\n"},
		{[]string{"extend", "node01-"}, "node01-1\tGPU 0 on node01, T left: mine\n" + second + ":4\n"},
		{[]string{"extend", "node01-1", ""}, ":4\n"},
		{[]string{"cancel", ""}, "node01-q1\tposition 1, 1 GPU for 4h\n:4\n"},
		{[]string{"unbook", ""}, booked + ":4\n"},
		{[]string{"unbook", bk.ID, ""}, ":4\n"},
		{[]string{"claim", "--node", ""}, "node01\talive, 0 of 4 GPUs free\n:4\n"},
		{[]string{"run", "--kind", ""}, "interactive\ta person at a shell (default limit 4h)\nbatch\ta run nobody watches (default limit 24h)\n:4\n"},
	}
	if other != "" {
		tests = append(tests, struct {
			args []string
			want string
		}{[]string{"who", ""}, "nobody\tholds 1 GPU\nroot\tholds 3 GPUs\nnode01:0\troot\nnode01:1\tnobody\nnode01:2\troot\nnode01:3\troot\n:4\n"})
	}
	for _, tc := range tests {
		if got := complete(tc.args...); got != tc.want {
			t.Errorf("dibs __complete %q =\n%s\nwant\n%s", tc.args, got, tc.want)
		}
	}
	// No agent: nothing offered, nothing printed but the directive, exit 0.
	cmd := exec.Command(dibsBin, "--socket", filepath.Join(dir, "none.sock"), "__complete", "release", "")
	out, err := cmd.Output()
	if err != nil || string(out) != ":4\n" {
		t.Errorf("completion with no agent: %q, %v; want only the directive", out, err)
	}
}

// TestStatusShowsWhenEachMemberWasLastHeard: a peer whose GPU numbers do
// not change sends no telemetry, so their age grows; `dibs status` shows
// how long ago the peer was heard from instead, a second or two while it
// is alive.
func TestStatusShowsWhenEachMemberWasLastHeard(t *testing.T) {
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"1xL40S", "1xL40S"}, Quiet: true})
	sock := nodes[0].Socket
	agenttest.Eventually(t, 20*time.Second, "node02's unchanged telemetry to be 3s old", func() bool {
		out, _, _ := dibs(t, sock, nil, "status", "--json")
		var s api.Status
		json.Unmarshal([]byte(out), &s)
		for _, m := range s.Members {
			if m.Name == "node02" && m.TelemetryAge > 3*time.Second {
				return true
			}
		}
		return false
	})
	out, _, code := dibs(t, sock, nil, "status")
	m := regexp.MustCompile(`(?m)^node02\s+\S+\s+alive\s+\S+\s+\d+\s+(\d+)s ago$`).FindStringSubmatch(out)
	if code != 0 || m == nil {
		t.Fatalf("status does not say when node02 was last heard, in seconds:\n%s", out)
	}
	if n, _ := strconv.Atoi(m[1]); n > 2 {
		t.Errorf("node02 last heard %ss ago, want within a probe round (≤ 2s):\n%s", m[1], out)
	}
	if !regexp.MustCompile(`(?m)^node01\s+\S+\s+alive\s+\S+\s+\d+\s+-$`).MatchString(out) {
		t.Errorf("status's own line should show - for last heard:\n%s", out)
	}
}

// TestAgentMetricsListen: `dibs agent --metrics-listen` serves /metrics
// where told, a claim made with the CLI shows its holder there, and the
// agent serves none without it; `dibs config check` reads [metrics].
func TestAgentMetricsListen(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "2xL40S", "--metrics-listen", "127.0.0.1:0")
	var url string
	agenttest.Eventually(t, 5*time.Second, "the agent to say where it serves metrics", func() bool {
		m := regexp.MustCompile(`msg="serving metrics".* addr=(http://127\.0\.0\.1:\d+/metrics)`).FindStringSubmatch(p.log.String())
		if m != nil {
			url = m[1]
		}
		return m != nil
	})
	if _, e, c := dibs(t, p.socket, nil, "claim", "-g", "1"); c != 0 {
		t.Fatal(e)
	}
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	me, _ := user.Current()
	want := fmt.Sprintf(`dibs_gpu_lease{gpu="0",node="node01",state="held",user=%q} 1`, me.Username)
	if !strings.Contains(string(body), want) || !strings.Contains(string(body), `dibs_gpu_lease{gpu="1",node="node01",state="free",user=""} 1`) {
		t.Errorf("/metrics lacks %s:\n%s", want, body)
	}

	q := startAgent(t, agenttest.PublicDir(t), "--sim", "1xL40S")
	if strings.Contains(q.log.String(), "metrics") {
		t.Errorf("an agent without --metrics-listen says: %s", q.log.String())
	}

	good := filepath.Join(dir, "good.toml")
	os.WriteFile(good, []byte("[metrics]\nlisten = \"127.0.0.1:9477\"\n"), 0o644)
	if out, e, c := dibs(t, p.socket, nil, "config", "check", good); c != 0 || !strings.Contains(out, "ok") {
		t.Errorf("config check with [metrics] listen: exit %d %q %q", c, out, e)
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("[metrics]\nlisten = \"9477\"\n"), 0o644)
	if _, e, c := dibs(t, p.socket, nil, "config", "check", bad); c == 0 || !strings.Contains(e, bad+`:2: metrics.listen: "9477" is not HOST:PORT`) {
		t.Errorf("config check with a bad metrics.listen: exit %d %q", c, e)
	}
	if _, e, c := dibs(t, p.socket, nil, "agent", "--metrics-listen", "localhost", "--sim", "1xL40S", "--data-dir", filepath.Join(dir, "x")); c == 0 || !strings.Contains(e, `--metrics-listen: "localhost" is not HOST:PORT`) {
		t.Errorf("agent --metrics-listen localhost: exit %d %q", c, e)
	}
}

// TestCLINodelistFlags: claim and run take --nodelist/-w and --exclude/-x,
// SLURM's words; the agent refuses what they leave nowhere to go.
func TestCLINodelistFlags(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "1xL40S")
	if _, e, c := dibs(t, p.socket, nil, "claim", "-g", "1", "-w", "elsewhere"); c == 0 || !strings.Contains(e, "no node named elsewhere in the cluster") {
		t.Errorf("claim -w elsewhere: exit %d, %q; want a refusal naming the node", c, e)
	}
	if _, e, c := dibs(t, p.socket, nil, "book", "-g", "1", "-x", "elsewhere", "--at", "in 2h", "--for", "1h"); c == 0 || !strings.Contains(e, "no node named elsewhere in the cluster") {
		t.Errorf("book -x elsewhere: exit %d, %q; want a refusal naming the node", c, e)
	}
	if _, e, c := dibs(t, p.socket, nil, "run", "--queue", "-g", "1", "--node", "a", "--nodelist", "b", "--", "true"); c == 0 || !strings.Contains(e, "--node a and --nodelist both say where") {
		t.Errorf("run --node a --nodelist b: exit %d, %q", c, e)
	}
	self, _, _ := dibs(t, p.socket, nil, "status", "--json")
	var st struct{ Node string }
	if err := json.Unmarshal([]byte(self), &st); err != nil || st.Node == "" {
		t.Fatalf("status --json: %v %q", err, self)
	}
	if _, e, c := dibs(t, p.socket, nil, "claim", "-g", "1", "-x", st.Node); c == 0 || !strings.Contains(e, "its --nodelist/--exclude keep it off "+st.Node) {
		t.Errorf("claim -x %s on the only node: exit %d, %q", st.Node, c, e)
	}
	if out, e, c := dibs(t, p.socket, nil, "claim", "-g", "1", "-w", st.Node, "--for", "1h"); c != 0 {
		t.Errorf("claim -w %s: exit %d, %q %q; want granted", st.Node, c, out, e)
	}
}
