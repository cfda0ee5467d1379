package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/launch"
)

// runJSON runs `dibs run --json ARGS` against the agent and returns the
// grant.
func runJSON(t *testing.T, sock string, args ...string) (id, session, notice string) {
	t.Helper()
	out, errOut, code := dibs(t, sock, nil, append([]string{"run", "--json"}, args...)...)
	if code != 0 {
		t.Fatalf("dibs run %q: exit %d: %s", args, code, errOut)
	}
	var r struct{ ID, Session, Notice string }
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.Session == "" {
		t.Fatalf("dibs run --json = %q (%v)", out, err)
	}
	t.Cleanup(func() { exec.Command("tmux", "kill-session", "-t", "="+r.Session).Run() })
	return r.ID, r.Session, r.Notice
}

// sessionAllowed is Cpus_allowed_list of the session's process (its pane's
// pid), once tmux's fork has become the agent's `_cpus` and that has bound
// itself and exec'd the command (comm: the run's exit-recording sh).
func sessionAllowed(t *testing.T, session, comm string) string {
	t.Helper()
	var allowed string
	agenttest.Eventually(t, 10*time.Second, session+"'s process to run "+comm, func() bool {
		pid := panePIDs()[session]
		if pid == 0 {
			return false
		}
		c, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		st, _ := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if strings.TrimSpace(string(c)) != comm {
			return false
		}
		for line := range strings.SplitSeq(string(st), "\n") {
			if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
				allowed = strings.TrimSpace(v)
				return true
			}
		}
		return false
	})
	return allowed
}

// onlineCPUs is the machine's online CPUs, as sysfs lists them.
func onlineCPUs(t *testing.T) string {
	b, err := os.ReadFile("/sys/devices/system/cpu/online")
	if err != nil {
		t.Skipf("no sysfs CPU list: %v", err)
	}
	return strings.TrimSpace(string(b))
}

// TestSessionRunsOnItsGPUsSocket: a real agent on a simulated node of two
// sockets of one core each (GPU 0 on core 0, GPU 1 on core 1) starts a
// run on GPU 1 in the user's own tmux bound to exactly core 1, one on GPU
// 0 to core 0, and one with --cpus any on every core; dibs ls says which
// cores are whose.
func TestSessionRunsOnItsGPUsSocket(t *testing.T) {
	agenttest.RequireTmux(t)
	if online := onlineCPUs(t); !strings.HasPrefix(online, "0-") {
		t.Skipf("needs CPUs 0 and 1 online (have %s)", online)
	}
	dir := agenttest.PublicDir(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	p := startAgent(t, dir, "--sim", "2xH100-80GB,sockets=2x1")

	ls, _, _ := dibs(t, p.socket, nil, "ls")
	if !strings.Contains(ls, "node01   cores: GPU 0: cores 0; GPU 1: cores 1") {
		t.Errorf("dibs ls does not say which cores are each GPU's:\n%s", ls)
	}
	_, s1, _ := runJSON(t, p.socket, "--ids", "1", "--", "sleep", "60")
	if got := sessionAllowed(t, s1, "sh"); got != "1" {
		t.Errorf("a run on GPU 1 (second socket) runs on CPUs %q, want exactly 1", got)
	}
	_, s0, _ := runJSON(t, p.socket, "--ids", "0", "--", "sleep 60") // a shell line
	if got := sessionAllowed(t, s0, "sh"); got != "0" {
		t.Errorf("a run on GPU 0 (first socket) runs on CPUs %q, want exactly 0", got)
	}
	dibs(t, p.socket, nil, "release", "--all")
	_, sa, _ := runJSON(t, p.socket, "--ids", "1", "--cpus", "any", "--", "sleep", "60")
	if got, all := sessionAllowed(t, sa, "sh"), onlineCPUs(t); got != all {
		t.Errorf("a run with --cpus any runs on CPUs %q, want every one (%s)", got, all)
	}
	if _, errOut, code := dibs(t, p.socket, nil, "run", "--ids", "0", "--cpus", "near", "--", "true"); code == 0 || !strings.Contains(errOut, "--cpus near: want local (the cores close to the GPUs, the default) or any") {
		t.Errorf("--cpus near: exit %d, %q", code, errOut)
	}

	// An admin's bind_cpus = false starts every session on that node unbound.
	dir2 := agenttest.PublicDir(t)
	conf := filepath.Join(dir2, "dibs.toml")
	if err := os.WriteFile(conf, []byte("[leases]\nbind_cpus = false\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p2 := startAgent(t, dir2, "--sim", "2xH100-80GB,sockets=2x1", "--config", conf)
	_, s2, _ := runJSON(t, p2.socket, "--ids", "1", "--name", "unbound", "--", "sleep", "60")
	if got, all := sessionAllowed(t, s2, "sh"), onlineCPUs(t); got != all {
		t.Errorf("a run on a node with bind_cpus = false runs on CPUs %q, want every one (%s)", got, all)
	}
}

// TestCPUsPerGPUChoosesCoresOfTheSocket: on a simulated node of two
// sockets of 16 cores (GPUs 0-2 on cores 0-15, 3-5 on 16-31),
// --cpus-per-gpu 4 on GPUs 3 and 4 gives the run 8 cores of the second
// socket in DIBS_CPUS and OMP_NUM_THREADS=8; this 2-core machine lacks
// them, so the session runs on any core and its pane says so. A second
// lease that must share some of them is told, and dibs ls shows both.
func TestCPUsPerGPUChoosesCoresOfTheSocket(t *testing.T) {
	agenttest.RequireTmux(t)
	dir := agenttest.PublicDir(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	p := startAgent(t, dir, "--sim", "6xH100-80GB,sockets=2x16")
	out := filepath.Join(dir, "env.out")
	id1, s1, notice := runJSON(t, p.socket, "--ids", "3,4", "--cpus-per-gpu", "4", "--",
		`echo "$DIBS_CPUS $OMP_NUM_THREADS $DIBS_GPU_CPUS" > `+out+`; grep Cpus_allowed_list /proc/self/status >> `+out+`; sleep 60`)
	if notice != "" {
		t.Errorf("first lease told %q, want nothing: nobody shares its cores", notice)
	}
	var got string
	agenttest.Eventually(t, 10*time.Second, "the run's environment in "+out, func() bool {
		b, _ := os.ReadFile(out)
		got = string(b)
		return strings.Count(got, "\n") == 2
	})
	if want := fmt.Sprintf("16-23 8 16-19;20-23\nCpus_allowed_list:\t%s\n", onlineCPUs(t)); got != want {
		t.Errorf("the run saw %q, want %q (DIBS_CPUS, OMP_NUM_THREADS, each GPU's; unbound: the machine lacks 16-23)", got, want)
	}
	agenttest.Eventually(t, 10*time.Second, "the pane to say the cores are missing", func() bool {
		pane, _ := exec.Command("tmux", "-S", launch.SocketPath(os.Getenv("TMUX_TMPDIR"), os.Getuid()), "capture-pane", "-p", "-t", "="+s1+":").Output()
		return strings.Contains(string(pane), "dibs: CPUs 16-23 are not on this machine: running on any CPU")
	})

	id2, _, notice := runJSON(t, p.socket, "--ids", "5", "--cpus-per-gpu", "12", "--", "sleep", "60")
	if want := fmt.Sprintf("your lease shares cores 16-19 with root's lease %s", id1); !strings.Contains(notice, want) {
		t.Errorf("second lease's notice = %q, want it to contain %q", notice, want)
	}
	agenttest.Eventually(t, 10*time.Second, "the first lease's holder to be told", func() bool {
		ev, _, _ := dibs(t, p.socket, nil, "events")
		return strings.Contains(ev, fmt.Sprintf("lease %s now shares cores 16-19 with root's lease %s: your data loaders may compete", id1, id2))
	})
	ls, _, _ := dibs(t, p.socket, nil, "ls")
	for _, want := range []string{
		"node01   cores: GPUs 0-2: cores 0-15; GPUs 3-5: cores 16-31",
		"└ cores 16-23 (shares 16-19 with " + id2 + ")",
		"└ cores 16-19,24-31 (shares 16-19 with " + id1 + ")",
	} {
		if !strings.Contains(ls, want) {
			t.Errorf("dibs ls lacks %q:\n%s", want, ls)
		}
	}
	for _, line := range strings.Split(ls, "\n") {
		if n := len([]rune(line)); n > 80 && !strings.HasPrefix(line, "! ") { // notices wrap as the terminal does
			t.Errorf("ls line is %d columns, want ≤ 80: %q", n, line)
		}
	}
	script, errOut, code := dibs(t, p.socket, nil, "export", "sbatch", id1)
	if code != 0 || !strings.Contains(script, "#SBATCH --gpus-per-node=2\n#SBATCH --cpus-per-gpu=4\n#SBATCH --gpu-bind=closest\n") {
		t.Errorf("export sbatch %s: exit %d %s, want --cpus-per-gpu=4 and --gpu-bind=closest after the GPUs:\n%s", id1, code, errOut, script)
	}
	if _, errOut, code := dibs(t, p.socket, nil, "run", "--ids", "0", "--cpus-per-gpu", "17", "--", "true"); code == 0 || !strings.Contains(errOut, "GPU 0 on node01 has 16 local cores (0-15): ask for at most 16 with --cpus-per-gpu") {
		t.Errorf("--cpus-per-gpu past the socket: exit %d, %q", code, errOut)
	}
}

// TestPerGPURanksRunOnTheirGPUsCores: with --per-gpu on a simulated node
// of two sockets of one core, each local rank runs on its own GPU's core,
// with DIBS_CPUS its own and (under --cpus-per-gpu) OMP_NUM_THREADS its
// count.
func TestPerGPURanksRunOnTheirGPUsCores(t *testing.T) {
	agenttest.RequireTmux(t)
	if online := onlineCPUs(t); !strings.HasPrefix(online, "0-") {
		t.Skipf("needs CPUs 0 and 1 online (have %s)", online)
	}
	dir := agenttest.PublicDir(t)
	t.Setenv("TMUX_TMPDIR", agenttest.TmuxDir(t))
	p := startAgent(t, dir, "--sim", "2xH100-80GB,sockets=2x1")
	out := filepath.Join(dir, "rank")
	_, errOut, code := dibs(t, p.socket, nil, "run", "-g", "2", "--per-gpu", "--cpus-per-gpu", "1", "--",
		`echo "$(grep Cpus_allowed_list /proc/self/status) $DIBS_CPUS $OMP_NUM_THREADS" > `+out+`.$LOCAL_RANK; sleep 60`)
	if code != 0 {
		t.Fatalf("dibs run --per-gpu: exit %d: %s", code, errOut)
	}
	t.Cleanup(func() { dibs(t, p.socket, nil, "release", "--all") })
	for rank, want := range []string{"Cpus_allowed_list:\t0 0 1", "Cpus_allowed_list:\t1 1 1"} {
		var got string
		agenttest.Eventually(t, 15*time.Second, fmt.Sprintf("rank %d's line", rank), func() bool {
			b, _ := os.ReadFile(fmt.Sprintf("%s.%d", out, rank))
			got = strings.TrimSpace(string(b))
			return strings.HasSuffix(string(b), "\n")
		})
		if got != want {
			t.Errorf("local rank %d saw %q, want %q", rank, got, want)
		}
	}
}
