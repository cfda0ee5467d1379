package main

import (
	"bytes"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// TestLsShowsProcessSM: `dibs ls` gives a process's SM share where the
// backend reports one, and nothing (never 0) where it does not.
func TestLsShowsProcessSM(t *testing.T) {
	sm := 70
	b := api.Board{Self: "node01", Nodes: []api.Node{{Name: "node01", State: api.NodeAlive, GPUs: []api.GPU{{GPU: nodeprobe.GPU{
		Index: 0, Model: "NVIDIA H100 80GB HBM3", MemoryTotalMiB: 81559,
		Processes: []nodeprobe.Process{
			{PID: 4242, UID: 1001, User: "bob", Command: "python", UsedMemoryMiB: 30000, SMUtilPct: &sm},
			{PID: 4343, UID: 1001, User: "bob", Command: "eval", UsedMemoryMiB: 1000},
		}}}}}}}
	var out bytes.Buffer
	printBoard(&out, b, time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC))
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.Contains(l, "└ pid") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 2 || !strings.HasSuffix(lines[0], " SM 70%") || strings.Contains(lines[1], "SM") {
		t.Errorf("process lines:\n%s\nwant SM 70%% on pid 4242's and no SM on pid 4343's", strings.Join(lines, "\n"))
	}
}
