package tui

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// TestAdoptedContainerIsNotMarkedInTheDetail: the detail pane marks a
// process "not the holder" as lease.Judge flags it, so root's processes of
// a container the holder adopted are not marked, and root's processes of
// another container are.
func TestAdoptedContainerIsNotMarkedInTheDetail(t *testing.T) {
	n := api.Node{Name: "node01", State: api.NodeAlive, Host: host("node01", 64, 512), TelemetryAt: fixedNow.Add(-time.Second)}
	g := gpu("NVIDIA L40S", 0, 90, 20000, 46068)
	l := mkLease("node01-1", "node01", "alice", uidAlice, []int{0}, 2*time.Hour)
	l.Containers = []string{"3f2a9c1b7d4e"}
	g.Lease = l
	adopted := proc(4242, "root", 0, "python", 9000)
	adopted.Container = "3f2a9c1b7d4e"
	other := proc(4343, "root", 0, "python", 9000)
	other.Container = "9a8b7c6d5e4f"
	g.Processes = []nodeprobe.Process{adopted, other}
	g.Flags = []lease.Flag{lease.FlagSquatted}
	n.GPUs = []api.GPU{g}
	h := newHarness(t, 160, 48, Options{})
	h.send(BoardMsg(api.Board{Self: "node01", You: lease.Caller{UID: uidAlice, User: "alice"}, GeneratedAt: fixedNow, Nodes: []api.Node{n}}))
	screen := h.screen()
	var sawAdopted, sawOther bool
	for _, line := range strings.Split(screen, "\n") {
		switch {
		case strings.Contains(line, "4242 root"):
			sawAdopted = true
			if strings.Contains(line, "← not") || !strings.Contains(line, "[3f2a9c1b7d4e]") {
				t.Errorf("the adopted container's process: %q, want its container and no mark", line)
			}
		case strings.Contains(line, "4343 root"):
			sawOther = true
			if !strings.Contains(line, "← not") {
				t.Errorf("another container's root process: %q, want it marked", line)
			}
		}
	}
	if !sawAdopted || !sawOther {
		t.Fatalf("the detail does not list both processes:\n%s", screen)
	}
}
