package main

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/base/prereq"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/nodeprobe/procfs"
)

// runLimits are the resource limits a container gets. Podman's default
// RLIMIT_NOFILE (1048576) is over the hard limit of a sandboxed root, which
// fails the start (`crun: setrlimit RLIMIT_NOFILE: Operation not
// permitted`); limits within every machine's keep the test about dibs.
var runLimits = []string{"--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"}

// ctrRuntime is a rootful container runtime a test drives: argv is its
// client and the flags that reach its daemon.
type ctrRuntime struct {
	argv []string
}

func (r ctrRuntime) cmd(args ...string) *exec.Cmd {
	return exec.Command(r.argv[0], append(cloneArgs(r.argv[1:]), args...)...)
}

// shell is r's client as a session's shell line starts it.
func (r ctrRuntime) shell() string { return strings.Join(r.argv, " ") }

// testImage imports into r a tiny image made from the host's own sh, env,
// cat and sleep and their libraries (no registry is reachable in CI), and
// removes it at cleanup.
func testImage(t *testing.T, r ctrRuntime) string {
	t.Helper()
	root := t.TempDir()
	for _, d := range []string{"bin", "proc", "sys", "dev", "etc", "tmp"} {
		if err := os.MkdirAll(filepath.Join(root, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"sh", "env", "cat", "sleep"} {
		bin, err := exec.LookPath(name)
		if err != nil {
			t.Skipf("no %s on this host to build the test image from", name)
		}
		copyInto(t, root, bin, filepath.Join("bin", name))
		out, _ := exec.Command("ldd", bin).Output()
		for _, f := range strings.Fields(string(out)) {
			if strings.HasPrefix(f, "/") {
				copyInto(t, root, f, f)
			}
		}
	}
	image := "localhost/dibs-test-" + strconv.Itoa(os.Getpid()) + ":latest"
	tar := exec.Command("tar", "-C", root, "-c", ".")
	imp := r.cmd("import", "-", image)
	pipe, err := tar.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	imp.Stdin = pipe
	if err := tar.Start(); err != nil {
		t.Fatal(err)
	}
	out, err := imp.CombinedOutput()
	tar.Wait()
	if err != nil {
		t.Skipf("%s import of a local root filesystem failed: %v: %s", r.argv[0], err, lastLine(out))
	}
	t.Cleanup(func() { r.cmd("rmi", "-f", image).Run() })
	return image
}

// needRoot skips a test of a rootful runtime when not root.
func needRoot(t *testing.T) {
	t.Helper()
	if os.Getuid() != 0 {
		prereq.Missing(t, "needs root: a rootful runtime runs a container's processes as root, which is what this test is about")
	}
}

// rootfulPodman finds an OCI runtime under which rootful podman starts
// the test image, or skips the test saying what failed.
func rootfulPodman(t *testing.T) (ctrRuntime, string) {
	t.Helper()
	needRoot(t)
	podman, err := exec.LookPath("podman")
	if err != nil {
		prereq.Missing(t, "podman is not installed (apt-get install podman runc)")
	}
	image := testImage(t, ctrRuntime{argv: []string{podman}})
	var tried []string
	for _, rt := range [][]string{nil, {"--runtime", "runc"}} {
		r := ctrRuntime{argv: append([]string{podman}, rt...)}
		out, err := r.cmd(append(append([]string{"run", "--rm"}, runLimits...), image, "/bin/sh", "-c", "true")...).CombinedOutput()
		if err == nil {
			t.Logf("rootful podman starts a container with %q; before it: %q", r.shell(), tried)
			return r, image
		}
		tried = append(tried, strings.Join(rt, " ")+": "+lastLine(out))
	}
	t.Skipf("rootful podman cannot start a container here: %s", strings.Join(tried, "; "))
	return ctrRuntime{}, ""
}

// rootfulDocker starts a private dockerd (its own data, socket, no
// networking: nothing here needs it) for the test, or skips saying why.
func rootfulDocker(t *testing.T) (ctrRuntime, string) {
	t.Helper()
	needRoot(t)
	docker, err := exec.LookPath("docker")
	if err != nil {
		prereq.Missing(t, "docker is not installed (apt-get install docker.io)")
	}
	dockerd, err := exec.LookPath("dockerd")
	if err != nil {
		prereq.Missing(t, "dockerd is not installed (apt-get install docker.io)")
	}
	dir, err := os.MkdirTemp("", "dibs-dockerd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "docker.sock")
	d := exec.Command(dockerd, "--data-root", filepath.Join(dir, "data"), "--exec-root", filepath.Join(dir, "exec"),
		"--pidfile", filepath.Join(dir, "pid"), "-H", "unix://"+sock, "--iptables=false", "--bridge=none")
	log := &syncBuffer{}
	d.Stdout, d.Stderr = log, log
	if err := d.Start(); err != nil {
		t.Skipf("start dockerd: %v", err)
	}
	exited := make(chan struct{})
	go func() { d.Wait(); close(exited) }()
	r := ctrRuntime{argv: []string{docker, "-H", "unix://" + sock}}
	// Stopped after the image and containers are removed (cleanups run
	// last-registered first).
	t.Cleanup(func() {
		d.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			d.Process.Kill()
			<-exited
		}
	})
	gone := false
	answered := poll.WaitEvery(200*time.Millisecond, 30*time.Second, func() bool {
		if r.cmd("info").Run() == nil {
			return true
		}
		select {
		case <-exited:
			gone = true
		default:
		}
		return gone
	})
	if gone {
		t.Skipf("dockerd exited: %s", lastLine([]byte(log.String())))
	}
	if !answered {
		t.Skipf("dockerd did not answer within 30s: %s", lastLine([]byte(log.String())))
	}
	image := testImage(t, r)
	if out, err := r.cmd(append(append([]string{"run", "--rm"}, runLimits...), image, "/bin/sh", "-c", "true")...).CombinedOutput(); err != nil {
		t.Skipf("rootful docker cannot start a container here: %s", lastLine(out))
	}
	return r, image
}

// cloneArgs copies a string slice, so appends never share its array.
func cloneArgs(s []string) []string { return append([]string(nil), s...) }

func copyInto(t *testing.T, root, src, dst string) {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	dst = filepath.Join(root, dst)
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(dst, b, 0o755); err != nil {
		t.Fatal(err)
	}
}

func lastLine(b []byte) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return lines[len(lines)-1]
}

// TestRootfulContainerFromASession: a container started with rootful
// podman from a `dibs run` session, as the user guide shows, gets the
// lease's GPUs by UUID (DIBS_GPU_UUIDS, NVIDIA_VISIBLE_DEVICES) and its
// DIBS_LEASE_ID; its process runs as root in a cgroup whose container id
// nodeprobe/procfs reads as podman's own, with the lease id from its
// environment, so the board counts it as the lease holder's. Where podman
// cannot run a container (no podman, not root, a sandbox's limits), it
// skips saying why.
func TestRootfulContainerFromASession(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(*testing.T) (ctrRuntime, string)
	}{
		{"podman", rootfulPodman},
		{"docker", rootfulDocker},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, image := tc.start(t)
			containerFromASession(t, r, image)
		})
	}
}

// containerFromASession runs image with r from a `dibs run` session and
// checks what the container gets and how the probe and the board see it.
func containerFromASession(t *testing.T, rt ctrRuntime, image string) {
	dir := agenttest.PublicDir(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Quiet: true})
	cidFile := filepath.Join(dir, "cid")
	script := rt.shell() + " run -d " + strings.Join(runLimits, " ") +
		" -e DIBS_GPU_UUIDS -e NVIDIA_VISIBLE_DEVICES -e DIBS_LEASE_ID " + image + " /bin/sleep 300 >" + cidFile + ".tmp 2>" + cidFile + ".err; mv " + cidFile + ".tmp " + cidFile + "; exec sleep 300"
	out, errOut, code := dibs(t, n.Socket, nil, "run", "-g", "1", "--json", "--", "sh", "-c", script)
	var r api.ClaimResponse
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil {
		t.Fatalf("dibs run: exit %d %q %q", code, out, errOut)
	}
	var cid string
	agenttest.Eventually(t, 60*time.Second, "the session's run -d to print the container id", func() bool {
		b, err := os.ReadFile(cidFile)
		cid = strings.TrimSpace(string(b))
		return err == nil
	})
	if len(cid) != 64 {
		e, _ := os.ReadFile(cidFile + ".err")
		t.Fatalf("run -d in the session printed %q: %s", cid, e)
	}
	t.Cleanup(func() {
		rt.cmd("kill", cid).Run() // SIGKILL: sleep as a container's pid 1 ignores SIGTERM
		rt.cmd("rm", "-f", cid).Run()
	})
	pidOut, err := rt.cmd("inspect", "-f", "{{.State.Pid}}", cid).Output()
	if err != nil {
		t.Fatalf("inspect %s: %v", cid, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(pidOut)))
	if err != nil || pid <= 0 {
		t.Fatalf("inspect %s: pid %q", cid, pidOut)
	}
	// The environment the container's process got, read on the host.
	env, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "environ"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := n.Client.Board(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var uuid string
	for _, g := range b.Nodes[0].GPUs {
		if g.Index == r.GPUs[0] {
			uuid = g.UUID
		}
	}
	for _, want := range []string{"DIBS_GPU_UUIDS=" + uuid, "NVIDIA_VISIBLE_DEVICES=" + uuid, "DIBS_LEASE_ID=" + r.ID} {
		if uuid == "" || !strings.Contains("\x00"+string(env), "\x00"+want+"\x00") {
			t.Errorf("the container's environment lacks %q: %q", want, strings.ReplaceAll(string(env), "\x00", " "))
		}
	}

	// What the probe reads of it, as every backend attributes a GPU pid.
	o := procfs.NewReader("/proc", procfs.NewUsers(time.Now)).Attribute(pid, "")
	if o.UID != 0 || o.Container != cid[:job.ContainerIDLen] || o.LeaseID != r.ID {
		t.Fatalf("procfs reads container pid %d as %+v; want root, container %s, lease %s", pid, o, cid[:12], r.ID)
	}
	// On a GPU of that lease (its holder someone else than root, as for a
	// person's session), the board counts it as the holder's; on a GPU of
	// another lease it is flagged.
	pr := nodeprobe.Process{PID: pid, UID: o.UID, User: o.User, Command: o.Command, Container: o.Container, LeaseID: o.LeaseID}
	snap := nodeprobe.Snapshot{GPUs: []nodeprobe.GPU{{Index: 0, Processes: []nodeprobe.Process{pr}}, {Index: 1, Processes: []nodeprobe.Process{pr}}}}
	now := time.Now()
	mine := lease.Lease{ID: r.ID, Node: "node01", GPUs: []int{0}, User: "ana", UID: 1000, Kind: lease.KindBatch, StartedAt: now, ExpiresAt: now.Add(time.Hour)}
	theirs := lease.Lease{ID: "node01-99", Node: "node01", GPUs: []int{1}, User: "bob", UID: 1001, Kind: lease.KindBatch, StartedAt: now, ExpiresAt: now.Add(time.Hour)}
	j := lease.Judge(snap, []lease.Lease{mine, theirs}, nil, now, lease.DefaultPolicy())
	if j[0].Has(lease.FlagSquatted) || !j[1].Has(lease.FlagSquatted) {
		t.Errorf("judged %+v; want the container the holder's on GPU 0 and a squatter on GPU 1", j)
	}
}
