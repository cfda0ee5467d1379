package node

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/nemesis/powercut"
)

// The kept runs stay within each person's bounds, oldest out first, and
// one person's runs never push out another's.
func TestKeptRunsBounds(t *testing.T) {
	big := strings.Repeat("x", 10<<10)
	tests := []struct {
		name      string
		runs      int
		arg       string
		wantFirst int // the oldest run still kept
		wantLast  int
	}{
		{"few", 3, "train.py", 0, 2},
		{"past the count", MaxKeptRunsPerUser + 10, "train.py", 10, MaxKeptRunsPerUser + 9},
		{"past the bytes", 20, big, 20 - MaxKeptBytesPerUser/(len(big)+len("python")+2), 19},
		{"one over the bytes alone", 1, strings.Repeat("x", MaxKeptBytesPerUser+1), -1, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var k keptRuns
			k.keep(KeptRun{Lease: "node01-9999", User: "bob", Job: job.Job{Command: []string{"bob.py"}}})
			for i := range tc.runs {
				k.keep(KeptRun{Lease: fmt.Sprintf("node01-%d", i), User: "alice", Job: job.Job{Command: []string{"python", tc.arg}}})
			}
			for i := range tc.runs {
				_, ok := k.find(fmt.Sprintf("node01-%d", i))
				if want := tc.wantFirst >= 0 && i >= tc.wantFirst && i <= tc.wantLast; ok != want {
					t.Errorf("run %d kept %v, want %v", i, ok, want)
				}
			}
			if r, ok := k.find("node01-9999"); !ok || r.User != "bob" {
				t.Errorf("bob's run was pushed out by alice's")
			}
			total := 0
			for _, r := range k.byUser["alice"] {
				total += r.size()
			}
			if len(k.byUser["alice"]) > MaxKeptRunsPerUser || total > MaxKeptBytesPerUser {
				t.Errorf("alice keeps %d runs, %d bytes: over the bounds", len(k.byUser["alice"]), total)
			}
		})
	}
}

// Saved runs come back after a restart, each held to the bounds again.
func TestKeptRunsSaveAndLoad(t *testing.T) {
	path := t.TempDir() + "/kept-runs.json"
	k := keptRuns{path: path}
	for i := range MaxKeptRunsPerUser + 3 {
		k.keep(KeptRun{Lease: fmt.Sprintf("node01-%d", i), User: "alice", Job: job.Job{Command: []string{"python", "train.py"}, Dir: "/srv", Torchrun: true}})
	}
	if err := k.save(); err != nil {
		t.Fatal(err)
	}
	again := keptRuns{path: path}
	if err := again.load(); err != nil {
		t.Fatal(err)
	}
	r, ok := again.find(fmt.Sprintf("node01-%d", MaxKeptRunsPerUser+2))
	if !ok || r.Job.Dir != "/srv" || !r.Job.Torchrun || len(again.byUser["alice"]) != MaxKeptRunsPerUser {
		t.Errorf("after a reload: %+v %v, %d runs; want the newest %d with their jobs", r, ok, len(again.byUser["alice"]), MaxKeptRunsPerUser)
	}
	if _, ok := again.find("node01-0"); ok {
		t.Errorf("the oldest run came back past the bound")
	}
}

// FuzzKeptRunsFile feeds the saved file's decoder: nothing panics, and what
// it accepts holds only runs with a lease id, a holder and a checked job.
func FuzzKeptRunsFile(f *testing.F) {
	f.Add([]byte(`[{"Lease":"node01-7","User":"alice","Job":{"command":["python","train.py"],"dir":"/srv"},"At":"2026-03-02T09:00:00Z"}]`))
	f.Add([]byte(`[{"Lease":"node01-7","User":"alice","Job":{"command":["py\u0000"]}}]`))
	f.Add([]byte(`[{"Lease":"../x","User":"alice","Job":{"command":["python"]}}]`))
	f.Add([]byte(`[{"Lease":"node01-7","User":"al ice","Job":{"kept":true}}]`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, b []byte) {
		runs, err := decodeKeptRuns(b)
		if err != nil {
			return
		}
		for _, r := range runs {
			if !words.ValidUserName(r.User) || len(r.Job.Command) == 0 || r.Job.Check() != nil {
				t.Fatalf("accepted a bad run %+v", r)
			}
		}
	})
}

// A kept run says where its output is (session, log, queued request,
// rank), across a save and a load, and is found by any of its names:
// `dibs logs` reads these, not the event log (weak 6 of the fourth round).
func TestKeptRunsNamed(t *testing.T) {
	path := t.TempDir() + "/kept-runs.json"
	k := keptRuns{path: path}
	job := job.Job{Command: []string{"python", "train.py"}}
	k.keep(KeptRun{Lease: "node01-7", User: "alice", Job: job, Session: "train", Log: "train-abc", Entry: "node02-q3#1", Rank: 1})
	k.keep(KeptRun{Lease: "node01-8", User: "bob", Job: job, Session: "train", Log: "train-abd"})
	if err := k.save(); err != nil {
		t.Fatal(err)
	}
	n := &Node{}
	n.kept.path = path
	if err := n.kept.load(); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"node01-7", "train", "node02-q3"} {
		got := n.RunsNamed("alice", name)
		if len(got) != 1 || got[0].Log != "train-abc" || got[0].Rank != 1 || got[0].Entry != "node02-q3#1" {
			t.Errorf("alice's runs named %s: %+v, want node01-7 with its log, request and rank", name, got)
		}
	}
	for _, name := range []string{"node01-8", "node02-q3#1", "node02", "tra"} {
		if got := n.RunsNamed("alice", name); len(got) != 0 {
			t.Errorf("alice's runs named %s: %+v, want none", name, got)
		}
	}
	if _, err := decodeKeptRuns([]byte(`[{"Lease":"node01-7","User":"alice","Job":{"command":["python"]},"Log":"../../etc/x"}]`)); err == nil {
		t.Error("a saved run whose log is a path was accepted")
	}
}

// TestKeptRunsSurviveAPowerCut saves kept runs on the power-cut file
// system (nemesis/powercut) and cuts the power: the runs saved are there
// after it. They were written and renamed with no fsync, so the cut lost
// the file (and, for a saved file replaced, could bring it back empty).
func TestKeptRunsSurviveAPowerCut(t *testing.T) {
	p := powercut.Mount(t, powercut.Options{})
	path := filepath.Join(p.Dir(), "kept-runs.json")
	k := keptRuns{path: path}
	for i := range 2 {
		k.keep(KeptRun{Lease: fmt.Sprintf("node01-%d", i), User: "alice", Job: job.Job{Command: []string{"python", "train.py"}}})
		if err := k.save(); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.Cut(); err != nil {
		t.Fatal(err)
	}
	back := keptRuns{path: path}
	if err := back.load(); err != nil {
		t.Fatalf("load after the cut: %v", err)
	}
	for i := range 2 {
		if _, ok := back.find(fmt.Sprintf("node01-%d", i)); !ok {
			t.Errorf("run node01-%d was saved before the power cut and is gone after it", i)
		}
	}
}
