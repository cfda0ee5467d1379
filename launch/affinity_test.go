package launch

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/poll"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// TestMain lets the test binary be the `_cpus` helper, as the dibs
// binaries are: run as `launch.test _cpus LIST COMMAND...`, it is CPUMain.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "_cpus" {
		if err := CPUMain(os.Args[2:], os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, "dibs:", err)
			os.Exit(127)
		}
	}
	os.Exit(m.Run())
}

// cpuHarness is a harness whose sessions run under the test binary as the
// `_cpus` helper.
func cpuHarness(t *testing.T) *harness {
	t.Helper()
	h := newHarness(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	h.l.cpuHelper = []string{exe, "_cpus"}
	return h
}

// lastCPU is the highest online CPU: a binding to it alone differs from
// the machine's whole set wherever there are two CPUs or more.
func lastCPU(t *testing.T) int {
	t.Helper()
	c := onlineCPUs()
	if len(c) < 2 {
		t.Skipf("needs two online CPUs to tell a binding from none (have %v)", c)
	}
	return c[len(c)-1]
}

// allowedList reads Cpus_allowed_list of pid, as a person checks a
// binding, once pid runs comm (tmux forks the pane, the helper execs).
func allowedList(t *testing.T, pid int, comm string) string {
	t.Helper()
	poll.Until(t, 10*time.Second, fmt.Sprintf("pid %d to run %s", pid, comm), func() bool {
		b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		return strings.TrimSpace(string(b)) == comm
	})
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.SplitSeq(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "Cpus_allowed_list:"); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatalf("no Cpus_allowed_list in /proc/%d/status", pid)
	return ""
}

// TestSessionRunsOnItsCPUs: a session started with CPUs runs its command
// (an argv, a shell line, or the login shell) bound to exactly those
// cores, in the user's own tmux server; cores the machine lacks are
// skipped with a line the pane shows.
func TestSessionRunsOnItsCPUs(t *testing.T) {
	h := cpuHarness(t)
	cpu := lastCPU(t)
	want := fmt.Sprint(cpu)
	t.Run("argv", func(t *testing.T) {
		s := h.start(t, Spec{Name: "cpus-argv", CPUs: want, Command: []string{"sleep", "60"}})
		// The pane's pid runs the command itself: the helper execs it.
		if got := allowedList(t, s.PanePID, "sleep"); got != want {
			t.Errorf("session's Cpus_allowed_list = %q, want %q", got, want)
		}
	})
	t.Run("login shell", func(t *testing.T) {
		s := h.start(t, Spec{Name: "cpus-shell", CPUs: want})
		shell := filepath.Base(h.me.Shell)
		if shell == "." || shell == "" {
			shell = "sh"
		}
		if got := allowedList(t, s.PanePID, shell); got != want {
			t.Errorf("login shell's Cpus_allowed_list = %q, want %q", got, want)
		}
	})
	t.Run("cores the machine lacks", func(t *testing.T) {
		out := filepath.Join(h.tmpDir, "lacks.out")
		list := fmt.Sprintf("%d,%d-%d", cpu, nodeprobe.MaxCPU-1, nodeprobe.MaxCPU)
		h.start(t, Spec{Name: "cpus-lacks", CPUs: list,
			Command: []string{"grep Cpus_allowed_list /proc/self/status > " + out + "; sleep 60"}})
		if got := readLine(t, out); got != "Cpus_allowed_list:\t"+want {
			t.Errorf("command saw %q, want Cpus_allowed_list: %s", got, want)
		}
		line := fmt.Sprintf("dibs: CPUs %d-%d are not on this machine: running on %s", nodeprobe.MaxCPU-1, nodeprobe.MaxCPU, want)
		poll.Until(t, 10*time.Second, "the pane to say which cores it skipped", func() bool {
			pane, _ := h.rawTmux(t, h.me, "capture-pane", "-p", "-t", "=cpus-lacks:")
			return strings.Contains(pane, line)
		})
	})
	t.Run("none of them", func(t *testing.T) {
		out := filepath.Join(h.tmpDir, "none.out")
		h.start(t, Spec{Name: "cpus-none", CPUs: fmt.Sprint(nodeprobe.MaxCPU),
			Command: []string{"grep Cpus_allowed_list /proc/self/status > " + out + "; sleep 60"}})
		if got, all := readLine(t, out), "Cpus_allowed_list:\t"+nodeprobe.FormatCPUList(onlineCPUs()); got != all {
			t.Errorf("command saw %q, want %q: it runs unbound", got, all)
		}
	})
}

// TestCPURankBindsEachLocalRank: `_cpus rank` gives local rank i the i-th
// GPU's cores of DIBS_GPU_CPUS, sets DIBS_CPUS to them and, under
// --cpus-per-gpu, OMP_NUM_THREADS to their count.
func TestCPURankBindsEachLocalRank(t *testing.T) {
	cpu := lastCPU(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		perGPU bool
		want   string
	}{{true, fmt.Sprintf("Cpus_allowed_list:\t%d %d 1", cpu, cpu)}, {false, fmt.Sprintf("Cpus_allowed_list:\t%d %d -", cpu, cpu)}} {
		cmd := exec.Command(exe, "_cpus", "rank", `echo "$(grep Cpus_allowed_list /proc/self/status) $DIBS_CPUS ${OMP_NUM_THREADS:--}"`)
		cmd.Env = []string{"PATH=" + DefaultPath, "SHELL=/bin/sh", "LOCAL_RANK=1", "DIBS_GPU_CPUS=0;" + fmt.Sprint(cpu)}
		if tt.perGPU {
			cmd.Env = append(cmd.Env, "DIBS_CPUS_PER_GPU=1")
		}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%v: %s", err, out)
		}
		if got := strings.TrimSpace(string(out)); got != tt.want {
			t.Errorf("per-gpu %v: rank 1 saw %q, want %q", tt.perGPU, got, tt.want)
		}
	}
}
