package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/nodeprobe"
	simprobe "github.com/dibs-gpu/dibs/nodeprobe/sim"

	"github.com/dibs-gpu/dibs/base/prereq"
)

// hostProbe is the simulator with this machine's real CPUs and memory, so
// the NodeName line dibs exports is one slurmd accepts for this machine.
type hostProbe struct {
	*simprobe.Sim
	cpus int
	mib  uint64
}

func (p hostProbe) Snapshot(ctx context.Context) (nodeprobe.Snapshot, error) {
	s, err := p.Sim.Snapshot(ctx)
	s.Host.CPUs, s.Host.MemoryMiB = p.cpus, p.mib
	return s, err
}

func memTotalMiB(t *testing.T) uint64 {
	f, err := os.Open("/proc/meminfo")
	if err != nil {
		t.Skipf("no /proc/meminfo to size the node: %v", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 2 && f[0] == "MemTotal:" {
			kb, _ := strconv.ParseUint(f[1], 10, 64)
			return kb / 1024
		}
	}
	t.Skip("no MemTotal in /proc/meminfo")
	return 0
}

// TestExportRunsUnderRealSLURM is the way out, tested against the real
// thing: a one-node dibs cluster whose two GPUs are fake device nodes
// exports its slurm.conf, gres.conf and cgroup.conf and a queued run's
// sbatch script; munged, slurmctld and slurmd start on that config, the
// node comes up idle, and the script runs with CUDA_VISIBLE_DEVICES set by
// SLURM's gres plugin. It needs root (daemons, mknod) and the Debian
// packages slurmctld, slurmd, slurm-client and munge (.ci/run installs
// them); elsewhere it skips, saying which is missing.
func TestExportRunsUnderRealSLURM(t *testing.T) {
	if os.Geteuid() != 0 {
		prereq.Missing(t, "needs root: it starts munged, slurmctld and slurmd and makes device nodes with mknod")
	}
	bins := map[string]string{}
	for _, b := range []string{"munged", "slurmctld", "slurmd", "sbatch", "sinfo", "scontrol"} {
		p, err := exec.LookPath(b)
		if err != nil {
			if p, err = exec.LookPath("/usr/sbin/" + b); err != nil {
				prereq.Missing(t, "%s is not on PATH: install slurmctld, slurmd, slurm-client and munge to run this test", b)
			}
		}
		bins[b] = p
	}
	// slurmctld runs only where SlurmctldHost names this machine (its short
	// host name), so the dibs node is named after it.
	host, err := os.Hostname()
	host, _, _ = strings.Cut(host, ".")
	if err != nil || words.ValidNodeName(host) != nil {
		t.Skipf("this machine's short host name %q cannot be a dibs and SLURM node name", host)
	}
	dir := agenttest.PublicDir(t)
	for _, d := range []string{"dev", "munge", "state", "spool", "log", "conf", "job", "data"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	os.Chmod(filepath.Join(dir, "munge"), 0o700)
	for i := 0; i < 2; i++ {
		path := filepath.Join(dir, "dev", "nvidia"+strconv.Itoa(i))
		if err := unix.Mknod(path, unix.S_IFCHR|0o666, int(unix.Mkdev(195, uint32(i)))); err != nil {
			prereq.Missing(t, "cannot make a fake GPU device node (mknod %s): %v", path, err)
		}
	}

	// A one-node dibs cluster on loopback, named after this machine.
	sim, err := simprobe.New(simprobe.Options{Spec: "2xH100", HostName: host})
	if err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	rand.Read(key)
	sock := filepath.Join(dir, "run", "dibs.sock")
	a, err := agent.New(agent.Config{
		NodeName: host, DataDir: filepath.Join(dir, "data"), Socket: sock, ProbeInterval: 100 * time.Millisecond, Tags: []string{"train"},
		Cluster: &agent.ClusterSettings{BindAddr: "127.0.0.1", Name: "dibs-slurm-test", Key: key, Fast: true},
		Log:     agenttest.Logger(t, host, true),
	}, agent.Deps{Probe: hostProbe{Sim: sim, cpus: runtime.NumCPU(), mib: memTotalMiB(t)}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Stop() })

	// A queued run: both GPUs are held, so it waits, and dibs still has
	// its command to export. It asks for the node's pool, which becomes
	// the partition export slurm writes for it, and for the node by name,
	// which becomes --nodelist.
	ctx := context.Background()
	me := a.For(os.Getuid())
	if _, err := me.Claim(ctx, api.ClaimRequest{Count: 2, Duration: "1h"}); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "job", "cuda.txt")
	sub, err := me.Submit(ctx, api.SubmitRequest{Claim: api.ClaimRequest{Count: 2, Duration: "10m", Kind: "batch", Tags: []string{"train"}, Node: host,
		Run: &api.RunSpec{Command: []string{"sh", "-c", "echo CUDA_VISIBLE_DEVICES=$CUDA_VISIBLE_DEVICES partition=$SLURM_JOB_PARTITION > " + out}}}})
	if err != nil {
		t.Fatal(err)
	}

	conf := filepath.Join(dir, "conf")
	if o, e, code := dibs(t, sock, nil, "export", "slurm", "--out", conf, "--dev-dir", filepath.Join(dir, "dev")); code != 0 {
		t.Fatalf("dibs export slurm: exit %d\n%s%s", code, o, e)
	}
	script, e, code := dibs(t, sock, nil, "export", "sbatch", sub.ID)
	if code != 0 || !strings.Contains(script, "#SBATCH --gpus-per-node=2") || !strings.Contains(script, "#SBATCH --partition=train\n") || !strings.Contains(script, "#SBATCH --nodelist="+host+"\n") {
		t.Fatalf("dibs export sbatch %s: exit %d\n%s%s", sub.ID, code, script, e)
	}
	scriptPath := filepath.Join(dir, "job", "run.sbatch")
	if err := os.WriteFile(scriptPath, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	slurmConf := filepath.Join(conf, "slurm.conf")
	exported, err := os.ReadFile(slurmConf)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"SlurmctldHost=" + host + "(127.0.0.1)", "NodeName=" + host + " NodeAddr=127.0.0.1 CPUs=" + strconv.Itoa(runtime.NumCPU()), "Gres=gpu:h100:2", "PartitionName=train Nodes=" + host} {
		if !strings.Contains(string(exported), want) {
			t.Fatalf("exported slurm.conf lacks %q:\n%s", want, exported)
		}
	}

	// munged with a key of its own.
	mkey := filepath.Join(dir, "munge", "munge.key")
	b := make([]byte, 1024)
	rand.Read(b)
	if err := os.WriteFile(mkey, b, 0o400); err != nil {
		t.Fatal(err)
	}
	msock := filepath.Join(dir, "munge", "munge.socket")
	daemon(t, dir, bins["munged"], "-F", "--force", "--socket="+msock, "--key-file="+mkey,
		"--log-file="+filepath.Join(dir, "log", "munged.log"), "--pid-file="+filepath.Join(dir, "munge", "munged.pid"),
		"--seed-file="+filepath.Join(dir, "munge", "munged.seed"))
	if !poll.Wait(10*time.Second, func() bool { _, err := os.Stat(msock); return err == nil }) {
		t.Fatalf("munged did not open %s:\n%s", msock, readLog(dir, "munged.out"))
	}

	// The site settings every install sets for itself (paths, ports, who
	// runs the daemons, munge's socket); everything else is as exported.
	site := map[string]string{
		"SlurmUser": "root", "StateSaveLocation": filepath.Join(dir, "state"), "SlurmdSpoolDir": filepath.Join(dir, "spool"),
		"SlurmctldPidFile": filepath.Join(dir, "slurmctld.pid"), "SlurmdPidFile": filepath.Join(dir, "slurmd.pid"),
		"SlurmctldLogFile": filepath.Join(dir, "log", "slurmctld.log"), "SlurmdLogFile": filepath.Join(dir, "log", "slurmd.log"),
		"SlurmctldPort": strconv.Itoa(agenttest.FreePort(t)), "SlurmdPort": strconv.Itoa(agenttest.FreePort(t)), "AuthInfo": "socket=" + msock,
	}
	env := append(os.Environ(), "SLURM_CONF="+slurmConf)
	run := func() bool {
		if err := os.WriteFile(slurmConf, []byte(setKeys(string(exported), site)), 0o644); err != nil {
			t.Fatal(err)
		}
		ctld := daemonEnv(t, dir, env, bins["slurmctld"], "-D", "-f", slurmConf)
		d := daemonEnv(t, dir, env, bins["slurmd"], "-D", "-f", slurmConf, "-N", host)
		idle := poll.Wait(20*time.Second, func() bool {
			o, _ := command(env, bins["sinfo"], "-h", "-N", "-o", "%N %t").Output()
			return strings.Contains(string(o), host+" idle")
		})
		if !idle {
			t.Logf("the node did not come up idle with %s:\n%s\n%s", site["ProctrackType"], readLog(dir, "slurmd.log"), readLog(dir, "slurmctld.log"))
			command(env, bins["scontrol"], "shutdown").Run()
			stop(ctld)
			stop(d)
		}
		return idle
	}
	if !run() {
		// A container without a cgroup tree of its own cannot confine
		// jobs: run the same config without cgroups, and say so.
		t.Log("retrying without cgroups (proctrack/linuxproc, task/none): this machine gives slurmd no cgroup tree")
		site["ProctrackType"], site["TaskPlugin"] = "proctrack/linuxproc", "task/none"
		os.RemoveAll(filepath.Join(dir, "state"))
		os.MkdirAll(filepath.Join(dir, "state"), 0o755)
		if !run() {
			t.Fatal("the node never came up idle under the exported config (logs above)")
		}
	}
	t.Cleanup(func() { command(env, bins["scontrol"], "shutdown").Run() })

	sb := command(env, bins["sbatch"], scriptPath)
	sb.Dir = filepath.Join(dir, "job")
	o, err := sb.CombinedOutput()
	if err != nil {
		t.Fatalf("sbatch: %v\n%s", err, o)
	}
	var got string
	if !poll.Wait(30*time.Second, func() bool {
		b, _ := os.ReadFile(out)
		got = strings.TrimSpace(string(b))
		return got != ""
	}) {
		q, _ := command(env, bins["scontrol"], "show", "job").CombinedOutput()
		t.Fatalf("the job did not run: %s\n%s\n%s", o, q, readLog(dir, "slurmd.log"))
	}
	if !regexp.MustCompile(`^CUDA_VISIBLE_DEVICES=0,1 partition=train$`).MatchString(got) {
		t.Errorf("the job saw %q, want CUDA_VISIBLE_DEVICES=0,1 (both fake GPUs, from gres.conf) in partition train (its dibs pool)", got)
	}
}

// setKeys sets each key of conf to its value: the line that sets it is
// replaced, or a line is added.
func setKeys(conf string, kv map[string]string) string {
	lines := strings.Split(conf, "\n")
	done := map[string]bool{}
	for i, l := range lines {
		k, _, ok := strings.Cut(l, "=")
		if v, set := kv[k]; ok && set && !strings.HasPrefix(l, "#") {
			lines[i] = k + "=" + v
			done[k] = true
		}
	}
	var extra []string
	for k, v := range kv {
		if !done[k] {
			extra = append(extra, k+"="+v)
		}
	}
	// Settings go before the node and partition lines.
	for i, l := range lines {
		if strings.HasPrefix(l, "NodeName=") {
			return strings.Join(append(append(lines[:i:i], extra...), lines[i:]...), "\n")
		}
	}
	return strings.Join(append(lines, extra...), "\n")
}

func command(env []string, name string, args ...string) *exec.Cmd {
	c := exec.Command(name, args...)
	c.Env = env
	return c
}

func daemon(t *testing.T, dir, name string, args ...string) *exec.Cmd {
	return daemonEnv(t, dir, os.Environ(), name, args...)
}

// daemonEnv starts a daemon in the foreground as a child, its output in
// dir/log, and ends it at cleanup.
func daemonEnv(t *testing.T, dir string, env []string, name string, args ...string) *exec.Cmd {
	t.Helper()
	logf, err := os.Create(filepath.Join(dir, "log", filepath.Base(name)+".out"))
	if err != nil {
		t.Fatal(err)
	}
	c := command(env, name, args...)
	c.Stdout, c.Stderr = logf, logf
	c.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := c.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	t.Cleanup(func() { stop(c); logf.Close() })
	return c
}

// stop ends a daemon the test started, by its pid.
func stop(c *exec.Cmd) {
	if c.ProcessState != nil {
		return
	}
	c.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { c.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		c.Process.Kill()
		<-done
	}
}

func readLog(dir, name string) string {
	b, _ := os.ReadFile(filepath.Join(dir, "log", name))
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}
