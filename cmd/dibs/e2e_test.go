package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
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

// dibsBin is the dibs binary built once for these tests, run the way a
// person runs it; dibsdBin is the daemon's, built beside it as the package
// installs them, so `dibs agent …` hands over to it.
var dibsBin, dibsdBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "dibs-bin-")
	if err != nil {
		panic(err)
	}
	os.Chmod(dir, 0o755)
	dibsBin, dibsdBin = filepath.Join(dir, "dibs"), filepath.Join(dir, "dibsd")
	build := exec.Command("go", "build", "-o", dir+"/", ".", "../dibsd")
	build.Stderr = os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build dibs and dibsd:", err)
		os.Exit(1)
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// proc is a running agent process.
type proc struct {
	cmd    *exec.Cmd
	socket string
	data   string
	log    *syncBuffer
	args   []string
}

// syncBuffer is a log the agent process writes while the test reads it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startAgent runs `dibs agent` as a child process and waits for its socket.
func startAgent(t *testing.T, dir string, args ...string) *proc {
	t.Helper()
	p := &proc{socket: filepath.Join(dir, "dibs.sock"), data: filepath.Join(dir, "data"), args: args}
	p.start(t)
	return p
}

func (p *proc) start(t *testing.T) {
	t.Helper()
	all := append([]string{"agent", "--node-name", "node01", "--data-dir", p.data, "--socket", p.socket, "--probe-interval", "200ms"}, p.args...)
	p.log = &syncBuffer{}
	p.cmd = exec.Command(dibsBin, all...)
	p.cmd.Stdout, p.cmd.Stderr = p.log, p.log
	p.cmd.Env = append(os.Environ(), "TMUX_TMPDIR="+os.Getenv("TMUX_TMPDIR"))
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	cmd := p.cmd
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
	})
	agenttest.Eventually(t, 10*time.Second, "the agent's socket", func() bool {
		_, err := api.NewClient(p.socket).Status(context.Background())
		return err == nil
	})
}

func (p *proc) kill9(t *testing.T) {
	t.Helper()
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

// dibs runs the CLI against the agent; uid < 0 runs it as the test's user.
func dibs(t *testing.T, socket string, cred *syscall.Credential, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	cmd := exec.Command(dibsBin, append([]string{"--socket", socket}, args...)...)
	var o, e bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &e
	cmd.Dir = "/"
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	err := cmd.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		t.Fatalf("run dibs %v: %v", args, err)
	}
	return o.String(), e.String(), code
}

func TestCLIClaimLsRelease(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "4xH100-80GB")

	out, errOut, code := dibs(t, p.socket, nil, "claim", "-g", "2", "--for", "2h", "--note", "ablation sweep", "--json")
	if code != 0 {
		t.Fatalf("claim exit %d: %s", code, errOut)
	}
	var r struct {
		ID                 string    `json:"id"`
		Node               string    `json:"node"`
		GPUs               []int     `json:"gpus"`
		CUDAVisibleDevices string    `json:"cuda_visible_devices"`
		Token              uint64    `json:"token"`
		ExpiresAt          time.Time `json:"expires_at"`
	}
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("claim --json: %v\n%s", err, out)
	}
	if r.ID != "node01-1" || r.Node != "node01" || r.CUDAVisibleDevices != "0,1" || r.Token != 1 {
		t.Errorf("claim --json = %+v", r)
	}

	out, _, code = dibs(t, p.socket, nil, "ls")
	if code != 0 {
		t.Fatalf("ls exit %d", code)
	}
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 80 {
			t.Errorf("ls line is %d columns, want ≤ 80: %q", n, line)
		}
	}
	for _, want := range []string{"node01-1", "ablation sweep", "free"} {
		if !strings.Contains(out, want) {
			t.Errorf("ls does not show %q:\n%s", want, out)
		}
	}

	out, _, _ = dibs(t, p.socket, nil, "ls", "--json")
	var b struct {
		Nodes []struct {
			Name string `json:"name"`
			GPUs []struct {
				Index          int             `json:"index"`
				UUID           string          `json:"uuid"`
				Model          string          `json:"model"`
				MemoryTotalMiB uint64          `json:"memory_total_mib"`
				MemoryUsedMiB  *uint64         `json:"memory_used_mib"`
				Utilization    json.RawMessage `json:"utilization_pct"`
				Processes      []any           `json:"processes"`
				Flags          []string        `json:"flags"`
				Lease          *struct {
					ID        string    `json:"id"`
					User      string    `json:"user"`
					Token     uint64    `json:"token"`
					Kind      string    `json:"kind"`
					Note      string    `json:"note"`
					StartedAt time.Time `json:"started_at"`
					ExpiresAt time.Time `json:"expires_at"`
				} `json:"lease"`
			} `json:"gpus"`
		} `json:"nodes"`
	}
	if err := json.Unmarshal([]byte(out), &b); err != nil {
		t.Fatalf("ls --json: %v", err)
	}
	g := b.Nodes[0].GPUs
	if len(g) != 4 || g[0].UUID == "" || g[0].MemoryTotalMiB == 0 || g[0].MemoryUsedMiB == nil || g[0].Processes == nil || g[0].Flags == nil {
		t.Fatalf("ls --json GPU 0 misses fields: %+v", g[0])
	}
	if g[1].Lease == nil || g[1].Lease.ID != "node01-1" || g[1].Lease.Kind != "interactive" || g[1].Lease.Note != "ablation sweep" {
		t.Errorf("ls --json GPU 1 lease = %+v", g[1].Lease)
	}
	if g[2].Lease != nil {
		t.Errorf("ls --json GPU 2 lease = %+v, want null", g[2].Lease)
	}

	out, _, code = dibs(t, p.socket, nil, "who")
	if code != 0 || !strings.Contains(out, "node01-1") {
		t.Errorf("who (exit %d):\n%s", code, out)
	}
	out, errOut, code = dibs(t, p.socket, nil, "release", "node01-1")
	if code != 0 || !strings.Contains(out, "released node01-1") {
		t.Errorf("release exit %d: %s%s", code, out, errOut)
	}
}

func TestCLIBadInputIsOneLineAndNonZero(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "2xL40S")
	if _, e, c := dibs(t, p.socket, nil, "claim", "-g", "2"); c != 0 {
		t.Fatalf("setup claim: %s", e)
	}
	bad := filepath.Join(dir, "bad.toml")
	os.WriteFile(bad, []byte("node_name = \"n1\"\n\n[leases]\nmax_batch = \"forever\"\n"), 0o644)
	unknown := filepath.Join(dir, "unknown.toml")
	os.WriteFile(unknown, []byte("node_name = \"n1\"\nprobe_intervall = \"2s\"\n"), 0o644)
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no count", []string{"claim"}, "say how many GPUs"},
		{"more than free", []string{"claim", "-g", "1"}, "only 0 free"},
		{"zero duration", []string{"claim", "-g", "1", "--for", "0m"}, "positive"},
		{"bad duration", []string{"claim", "-g", "1", "--for", "tomorrow"}, "cannot read duration"},
		{"over max", []string{"claim", "-g", "1", "--kind", "batch", "--for", "60d"}, "maximum"},
		{"unknown lease", []string{"release", "node01-77"}, "no lease node01-77"},
		{"not a lease id", []string{"extend", "banana", "--for", "1h"}, "not a lease id"},
		{"no gpu", []string{"claim", "--ids", "5"}, "no GPU 5"},
		{"config bad value", []string{"config", "check", bad}, bad + ":4: leases.max_batch"},
		{"config unknown key", []string{"config", "check", unknown}, unknown + ":2: unknown key \"probe_intervall\""},
		{"no agent", []string{"--socket", filepath.Join(dir, "none.sock"), "ls"}, "no dibs agent at"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := dibs(t, p.socket, nil, tc.args...)
			if code == 0 {
				t.Fatalf("exit 0, want non-zero; stdout %q", out)
			}
			if !strings.Contains(errOut, tc.want) {
				t.Errorf("stderr %q does not say %q", errOut, tc.want)
			}
			if n := strings.Count(strings.TrimSpace(errOut), "\n"); n != 0 {
				t.Errorf("stderr is %d lines, want one: %q", n+1, errOut)
			}
		})
	}
}

func TestCLIRunStartsTmuxSession(t *testing.T) {
	agenttest.RequireTmux(t)
	dir := agenttest.PublicDir(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	p := startAgent(t, dir, "--sim", "4xRTX-PRO-6000")
	out, errOut, code := dibs(t, p.socket, nil, "run", "-g", "1", "--json", "--", "sleep", "30")
	if code != 0 {
		t.Fatalf("run exit %d: %s", code, errOut)
	}
	var r struct {
		ID      string `json:"id"`
		Session string `json:"session"`
	}
	json.Unmarshal([]byte(out), &r)
	if r.Session != "dibs-node01-1" {
		t.Fatalf("run --json session = %q, want dibs-node01-1 (%s)", r.Session, out)
	}
	ls, err := exec.Command("tmux", "ls", "-F", "#{session_name}").CombinedOutput()
	if err != nil || !strings.Contains(string(ls), r.Session) {
		t.Fatalf("the user's own `tmux ls` = %q (%v), want %s", ls, err, r.Session)
	}
	exec.Command("tmux", "kill-session", "-t", "="+r.Session).Run()
	agenttest.Eventually(t, 5*time.Second, "the lease to end with the session", func() bool {
		out, _, _ := dibs(t, p.socket, nil, "who")
		return strings.Contains(out, "nobody holds anything")
	})
}

// TestTwoUsersCannotTouchEachOthersLeases runs the CLI as root and as nobody
// against one root agent: identity comes from the kernel, not from anything
// the client says.
func TestTwoUsersCannotTouchEachOthersLeases(t *testing.T) {
	if os.Geteuid() != 0 {
		prereq.Missing(t, "needs root: the test runs a second client as the user nobody")
	}
	nobody, err := user.Lookup("nobody")
	if err != nil {
		prereq.Missing(t, "no user nobody on this machine")
	}
	uid, _ := strconv.Atoi(nobody.Uid)
	gid, _ := strconv.Atoi(nobody.Gid)
	asNobody := &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "4xH100-80GB")

	out, errOut, code := dibs(t, p.socket, nil, "claim", "-g", "1", "--json")
	if code != 0 {
		t.Fatalf("root claim: %s", errOut)
	}
	var rootLease api.ClaimResponse
	json.Unmarshal([]byte(out), &rootLease)

	out, errOut, code = dibs(t, p.socket, asNobody, "claim", "-g", "1", "--json")
	if code != 0 {
		t.Fatalf("nobody's claim: %s", errOut)
	}
	var nobodyLease api.ClaimResponse
	json.Unmarshal([]byte(out), &nobodyLease)

	_, errOut, code = dibs(t, p.socket, asNobody, "release", rootLease.ID)
	if code == 0 || !strings.Contains(errOut, "belongs to root") {
		t.Errorf("nobody releasing root's lease: exit %d, %q; want refusal", code, errOut)
	}
	_, errOut, code = dibs(t, p.socket, asNobody, "extend", rootLease.ID, "--for", "1h")
	if code == 0 || !strings.Contains(errOut, "belongs to root") {
		t.Errorf("nobody extending root's lease: exit %d, %q; want refusal", code, errOut)
	}
	out, _, _ = dibs(t, p.socket, nil, "who", "nobody")
	if !strings.Contains(out, nobodyLease.ID) || strings.Contains(out, rootLease.ID) {
		t.Errorf("who nobody:\n%s", out)
	}
	// nobody's release --all touches only nobody's lease.
	out, _, code = dibs(t, p.socket, asNobody, "release", "--all")
	if code != 0 || !strings.Contains(out, nobodyLease.ID) || strings.Contains(out, rootLease.ID) {
		t.Errorf("nobody release --all: %q", out)
	}
	out, _, _ = dibs(t, p.socket, nil, "who")
	if !strings.Contains(out, rootLease.ID) {
		t.Errorf("root's lease is gone after nobody's release --all:\n%s", out)
	}
}

// TestSIGKILLKeepsEveryAcknowledgedLease kills the agent in the middle of a
// stream of claims and releases and checks that every lease a client heard
// "granted" for (and not "released") is there after a restart.
func TestSIGKILLKeepsEveryAcknowledgedLease(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "16xH100-80GB")
	// Without retries: a call cut off by the kill returns at once, instead
	// of trying for api.RetryFor against a dead agent.
	cl := api.NewClient(p.socket).WithoutRetry()

	var mu sync.Mutex
	acked := map[string]bool{}
	var granted, released atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				r, err := cl.Claim(context.Background(), api.ClaimRequest{Count: 1})
				if err != nil {
					var ae *api.Error
					if errors.As(err, &ae) && ae.Code == "conflict" {
						continue
					}
					return // the agent died
				}
				mu.Lock()
				acked[r.ID] = true
				mu.Unlock()
				granted.Add(1)
				if i%2 == 1 {
					if _, err := cl.Release(context.Background(), api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
						// The agent died with the release sent: it may or
						// may not be gone, so it is no longer owed.
						mu.Lock()
						delete(acked, r.ID)
						mu.Unlock()
						return
					}
					mu.Lock()
					delete(acked, r.ID)
					mu.Unlock()
					released.Add(1)
				}
			}
		}()
	}
	// Kill it once the stream is well under way: claims granted and
	// released, the workers still going.
	poll.Until(t, 10*time.Second, "claims granted and released before the kill", func() bool {
		return granted.Load() >= 12 && released.Load() >= 4
	})
	p.kill9(t)
	close(stop)
	wg.Wait()

	p.start(t)
	b, err := api.NewClient(p.socket).Board(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	have := map[string]bool{}
	for _, g := range b.Nodes[0].GPUs {
		if g.Lease != nil {
			have[g.Lease.ID] = true
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if len(acked) == 0 {
		t.Fatal("no claim was acknowledged before the kill; the test proved nothing")
	}
	for id := range acked {
		if !have[id] {
			t.Errorf("lease %s was acknowledged but is gone after SIGKILL and restart", id)
		}
	}
	t.Logf("%d acknowledged leases survived SIGKILL", len(acked))
}

func TestKeygenAndGossipWithoutAKey(t *testing.T) {
	dir := agenttest.PublicDir(t)
	key := filepath.Join(dir, "etc", "cluster.key")
	out, errOut, code := dibs(t, filepath.Join(dir, "none.sock"), nil, "keygen", key)
	if code != 0 || !strings.Contains(out, "wrote a new cluster key") {
		t.Fatalf("keygen: exit %d %q %q", code, out, errOut)
	}
	fi, err := os.Stat(key)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode = %v (%v), want 0600", fi.Mode().Perm(), err)
	}
	if _, errOut, code = dibs(t, filepath.Join(dir, "none.sock"), nil, "keygen", key); code == 0 || !strings.Contains(errOut, "--force") {
		t.Errorf("keygen over an existing key: exit %d %q, want a refusal", code, errOut)
	}
	// Gossip beyond loopback without a key is refused, saying how to make one.
	_, errOut, code = dibs(t, filepath.Join(dir, "a.sock"), nil, "agent", "--sim", "1xL40S", "--data-dir", filepath.Join(dir, "d"),
		"--bind", "0.0.0.0:0", "--join", "127.0.0.1:1")
	if code == 0 || !strings.Contains(errOut, "dibs keygen") {
		t.Errorf("agent gossiping without a key: exit %d %q, want a refusal naming dibs keygen", code, errOut)
	}
	// A garbage key file is refused with a clear line.
	bad := filepath.Join(dir, "bad.key")
	os.WriteFile(bad, []byte("not a key\n"), 0o600)
	_, errOut, code = dibs(t, filepath.Join(dir, "b.sock"), nil, "agent", "--sim", "1xL40S", "--data-dir", filepath.Join(dir, "e"),
		"--bind", "127.0.0.1:0", "--cluster-key-file", bad)
	if code == 0 || !strings.Contains(errOut, bad) {
		t.Errorf("agent with a bad key file: exit %d %q", code, errOut)
	}
}

func TestAgentStopsCleanlyOnSIGTERM(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "1xL40S")
	p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("agent exit after SIGTERM: %v, want 0\n%s", err, p.log.String())
		}
	case <-time.After(10 * time.Second):
		t.Fatal("agent did not stop within 10s of SIGTERM")
	}
	if _, err := os.Stat(p.socket); !os.IsNotExist(err) {
		t.Errorf("socket %s left behind after a clean stop", p.socket)
	}
}
