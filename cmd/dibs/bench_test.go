package main

import (
	"os"
	"os/exec"
	"slices"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
)

// These benchmarks time whole `dibs` processes, start to exit, the way a
// person at a shell feels them (compare `squeue`, `salloc`, `srun`).

// benchCLI starts an agent on 8 simulated GPUs and times `dibs ARGS...`;
// after runs untimed between iterations with the agent's socket.
func benchCLI(b *testing.B, args []string, after func(socket string)) {
	dir := agenttest.PublicDir(b)
	socket := dir + "/dibs.sock"
	cmd := exec.Command(dibsBin, "agent", "--node-name", "node01", "--data-dir", dir+"/data", "--socket", socket, "--sim", "8xH100-80GB")
	cmd.Env = append(os.Environ(), "TMUX_TMPDIR="+agenttest.TmuxDir(b))
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	agenttest.Eventually(b, 10*time.Second, "the agent's socket", func() bool {
		return exec.Command(dibsBin, "--socket", socket, "status").Run() == nil
	})
	lat := make([]time.Duration, 0, b.N)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := exec.Command(dibsBin, append([]string{"--socket", socket}, args...)...)
		c.Env = cmd.Env
		t0 := time.Now()
		out, err := c.CombinedOutput()
		lat = append(lat, time.Since(t0))
		if err != nil {
			b.Fatalf("dibs %v: %v\n%s", args, err, out)
		}
		if after != nil {
			b.StopTimer()
			after(socket)
			b.StartTimer()
		}
	}
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "median-ms")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}

func releaseAll(socket string) {
	exec.Command(dibsBin, "--socket", socket, "release", "--all").Run()
}

func BenchmarkCLILs(b *testing.B) {
	benchCLI(b, []string{"ls"}, nil)
}

func BenchmarkCLIClaim(b *testing.B) {
	benchCLI(b, []string{"claim", "-g", "1"}, releaseAll)
}

func BenchmarkCLIRunTrue(b *testing.B) {
	agenttest.RequireTmux(b)
	benchCLI(b, []string{"run", "-g", "1", "--", "true"}, releaseAll)
}
