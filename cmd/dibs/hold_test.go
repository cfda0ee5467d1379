package main

import (
	"bytes"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/prereq"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// A borrowed lease (beyond its holder's quota, so it may be preempted) is
// marked in `dibs ls` and `dibs who`, not only in --json; a MIG instance's
// UUID is printed whole, as CUDA_VISIBLE_DEVICES takes it.
func TestTablesMarkBorrowedAndKeepMIGUUIDs(t *testing.T) {
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	const uuid = "MIG-eac955e4-841d-8f2a-9c3e-1d2b3c4d5e6f"
	borrowed := lease.Lease{ID: "node01-7", Node: "node01", GPUs: []int{0}, User: "carol", Kind: lease.KindInteractive,
		Note: "sweep", ExpiresAt: now.Add(time.Hour), Borrowed: true}
	mig := lease.Lease{ID: "node03-2", Node: "node03", GPUs: []int{0}, User: "alice", Kind: lease.KindInteractive,
		MIG: uuid, ExpiresAt: now.Add(2 * time.Hour)}
	b := api.Board{Self: "node01", Nodes: []api.Node{
		{Name: "node01", State: api.NodeAlive, GPUs: []api.GPU{{GPU: nodeprobe.GPU{Index: 0, Model: "NVIDIA H100 80GB HBM3"}, Lease: &borrowed}}},
		{Name: "node03", State: api.NodeAlive, GPUs: []api.GPU{{
			GPU: nodeprobe.GPU{Index: 0, Model: "NVIDIA A100-SXM4-80GB", MIG: nodeprobe.MIGEnabled,
				MIGDevices: []nodeprobe.MIGDevice{{Index: 0, Profile: "3g.40gb", UUID: uuid, MemoryTotalMiB: 40 << 10}}},
			Shares: []lease.Lease{mig}}}},
	}}
	var ls bytes.Buffer
	printBoard(&ls, b, now)
	var who bytes.Buffer
	rows, err := whoRows(b)
	if err != nil {
		t.Fatal(err)
	}
	printWho(&who, rows, now)
	tests := []struct {
		table, out string
		want       []string
	}{
		{"ls", ls.String(), []string{"borrowed; sweep", uuid}},
		{"who", who.String(), []string{"borrowed; sweep", "node03:MIG", "└ " + uuid}},
	}
	for _, tt := range tests {
		t.Run(tt.table, func(t *testing.T) {
			for _, w := range tt.want {
				if !strings.Contains(tt.out, w) {
					t.Errorf("dibs %s does not show %q:\n%s", tt.table, w, tt.out)
				}
			}
		})
	}
	for _, out := range []string{ls.String(), who.String()} {
		for _, line := range strings.Split(out, "\n") {
			if n := len([]rune(line)); n > 80 {
				t.Errorf("line is %d columns, want ≤ 80: %q", n, line)
			}
		}
	}
	if line := lineWith(ls.String(), "carol"); !strings.Contains(line, "borrowed") {
		t.Errorf("the GPU line of a borrowed lease has no borrowed flag: %q", line)
	}
}

func whoRows(b api.Board) ([]lease.Lease, error) { return who(b, "") }

// Mistyped and contradictory flags are refused with one line that says
// what to do, before anything reaches an agent.
func TestFlagMistakesSayWhatToDo(t *testing.T) {
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"claim", "--gpu", "1"}, "unknown flag: --gpu: did you mean --gpus?"},
		{[]string{"run", "--gpu", "1", "--", "true"}, "did you mean --gpus?"},
		{[]string{"ls", "--jsn"}, "unknown flag: --jsn: did you mean --json?"},
		{[]string{"claim", "--zzzzzz"}, "(`dibs claim --help` lists its flags)"},
		{[]string{"claim", "-g", "2", "--ids", "0,1"}, "-g 2 and --ids 0,1 both say which GPUs: give -g N for any N free GPUs, or --ids for those GPUs, not both"},
		{[]string{"book", "-g", "2", "--ids", "0,1", "--at", "tomorrow 09:00", "--for", "1h"}, "-g 2 and --ids 0,1 both say which GPUs"},
		{[]string{"book", "--gpu", "2"}, "did you mean --gpus?"},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			var out, errOut bytes.Buffer
			c := &cli{stdout: &out, stderr: &errOut}
			root := rootCmd(c)
			root.SetArgs(append([]string{"--socket", filepath.Join(t.TempDir(), "none.sock")}, tt.args...))
			root.SetOut(&out)
			root.SetErr(&errOut)
			err := root.Execute()
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("dibs %s: %v; want %q", strings.Join(tt.args, " "), err, tt.want)
			}
		})
	}
}

// The jq example in `dibs events --help` works as printed on what
// `dibs events --json` prints (it printed nothing: the output is one
// object, {"events": […]}, not a stream of events).
func TestEventsJSONExampleWorks(t *testing.T) {
	jq, err := exec.LookPath("jq")
	if err != nil {
		prereq.Missing(t, "jq is not installed, so the example cannot be run")
	}
	at := time.Date(2026, 3, 10, 15, 0, 0, 0, time.UTC)
	l := api.EventList{Events: []event.Event{
		{Node: "node01", At: at, Kind: event.EventClaim, User: "alice", Text: "alice claimed GPU 1"},
		{Node: "node01", At: at, Kind: event.EventEnd, User: "bob", Text: "bob's lease ended at its time limit"},
	}}
	var js bytes.Buffer
	if err := printJSON(&js, l); err != nil {
		t.Fatal(err)
	}
	example := eventsCmd(&cli{}).Example
	line := ""
	for _, x := range strings.Split(example, "\n") {
		if strings.Contains(x, "--json | jq") && !strings.Contains(x, "-f ") {
			line = x
		}
	}
	_, filter, ok := strings.Cut(line, "jq '")
	filter, _, _ = strings.Cut(filter, "'")
	if !ok || filter == "" {
		t.Fatalf("no jq example in %q", example)
	}
	cmd := exec.Command(jq, "-c", filter)
	cmd.Stdin = &js
	out, err := cmd.Output()
	if err != nil || !strings.Contains(string(out), "bob's lease ended") || strings.Contains(string(out), "alice claimed") {
		t.Errorf("jq %q on dibs events --json: %s, %v; want only the end event", filter, out, err)
	}
}

// With --json, an error is one JSON object (the message, and the agent's
// code when it refused), so a script reads it as it reads the answers;
// without, one line.
func TestErrorsAreJSONUnderJSON(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantJSON bool
		want     string
	}{
		{"claim --json, bad flags", []string{"claim", "-g", "2", "--ids", "0,1", "--json"}, true, "both say which GPUs"},
		{"ls --json, no agent", []string{"ls", "--json"}, true, "socket"},
		{"claim, bad flags", []string{"claim", "-g", "2", "--ids", "0,1"}, false, "dibs: -g 2 and --ids 0,1"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out bytes.Buffer
			root := rootCmd(&cli{stdout: &out, stderr: &out})
			root.SetArgs(append([]string{"--socket", filepath.Join(t.TempDir(), "none.sock")}, tt.args...))
			root.SetOut(&out)
			root.SetErr(&out)
			cmd, err := root.ExecuteC()
			if err == nil {
				t.Fatal("no error")
			}
			var w bytes.Buffer
			if code := reportError(&w, cmd, err); code == 0 {
				t.Errorf("exit status 0 for an error")
			}
			var je jsonError
			isJSON := json.Unmarshal(w.Bytes(), &je) == nil && je.Error != ""
			if isJSON != tt.wantJSON || !strings.Contains(w.String(), tt.want) {
				t.Errorf("printed %q; want JSON %v saying %q", w.String(), tt.wantJSON, tt.want)
			}
		})
	}
}

// An agent's refusal keeps its code in the JSON.
func TestJSONErrorKeepsTheAgentsCode(t *testing.T) {
	var w bytes.Buffer
	printJSONError(&w, &api.Error{Status: 409, Code: "conflict", Msg: "no GPU is free"})
	var je jsonError
	if err := json.Unmarshal(w.Bytes(), &je); err != nil || je.Code != "conflict" || je.Error != "no GPU is free" {
		t.Errorf("printed %q (%v); want code conflict and the message", w.String(), err)
	}
}
