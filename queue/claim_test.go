package queue_test

import (
	"reflect"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// TestEntryCarriesItsClaim: a claim queued as an entry (queue.NewEntry), made
// durable by its origin (id, submit time, QueueEntry.Check's defaults), comes
// back to the node of each rank as the claim that rank is granted with
// (QueueEntry.RankClaim): its time, kind and note, when it was queued, the
// MIG instance or memory budget it asks for, and its run, whose session is
// named for the task and the rank.
func TestEntryCarriesItsClaim(t *testing.T) {
	p := lease.DefaultPolicy()
	run := func(name string) *job.RunSpec {
		return &job.RunSpec{Name: name, Command: []string{"python", "train.py"}, Dir: "/home/alice/exp", Env: map[string]string{"PATH": "/usr/bin"}}
	}
	tests := []struct {
		name  string
		claim lease.Claim
		ask   queue.Ask
		id    string // the id its origin gives it
		gpus  []int  // where the scheduler placed the rank
		rank  int
		// the entry's shape and what only the queue reads
		wantNodes, wantPerNode int
		wantModel              string
		wantJob                *job.Job
		// the rank's claim
		want lease.Claim
	}{
		{name: "a count and a run on one node",
			claim: lease.Claim{Count: 2, Duration: 2 * time.Hour, Kind: lease.KindBatch, Note: "ablation", Run: run("train"),
				RequestID: "submit-0001", Tags: []string{"east"}, Model: "H100"},
			id: "node01-q1", gpus: []int{0, 1},
			wantNodes: 1, wantPerNode: 2, wantModel: "H100",
			wantJob: &job.Job{Name: "train", Command: []string{"python", "train.py"}, Dir: "/home/alice/exp", Env: map[string]string{"PATH": "/usr/bin"}},
			want: lease.Claim{GPUs: []int{0, 1}, Duration: 2 * time.Hour, Kind: lease.KindBatch, Note: "ablation", QueuedAt: t0,
				Run: run("train")}},
		{name: "the policy's defaults, no run",
			claim: lease.Claim{Count: 1},
			id:    "node01-q2", gpus: []int{3},
			wantNodes: 1, wantPerNode: 1,
			want: lease.Claim{GPUs: []int{3}, Duration: p.DefaultInteractive, Kind: lease.KindInteractive, QueuedAt: t0}},
		{name: "a gang's rank under torchrun",
			claim: lease.Claim{Duration: time.Hour, Kind: lease.KindBatch, Run: run("train")},
			ask:   queue.Ask{Nodes: 2, GPUsPerNode: 4, Torchrun: true, Requeue: true},
			id:    "node01-q3", gpus: []int{4, 5, 6, 7}, rank: 1,
			wantNodes: 2, wantPerNode: 4,
			wantJob: &job.Job{Name: "train", Command: []string{"python", "train.py"}, Dir: "/home/alice/exp", Env: map[string]string{"PATH": "/usr/bin"}, Torchrun: true},
			want:    lease.Claim{GPUs: []int{4, 5, 6, 7}, Duration: time.Hour, Kind: lease.KindBatch, QueuedAt: t0, Run: run("train-1")}},
		{name: "an array's task",
			claim: lease.Claim{Count: 1, Duration: time.Hour, Run: run("sweep")},
			ask:   queue.Ask{PerGPU: true},
			id:    "node01-q4/5", gpus: []int{0},
			wantNodes: 1, wantPerNode: 1,
			wantJob: &job.Job{Name: "sweep", Command: []string{"python", "train.py"}, Dir: "/home/alice/exp", Env: map[string]string{"PATH": "/usr/bin"}, PerGPU: true},
			want:    lease.Claim{GPUs: []int{0}, Duration: time.Hour, Kind: lease.KindInteractive, QueuedAt: t0, Run: run("sweep-5")}},
		{name: "a run the node names",
			claim: lease.Claim{Count: 1, Duration: time.Hour, Run: &job.RunSpec{Command: []string{"make"}}},
			id:    "node01-q5", gpus: []int{2},
			wantNodes: 1, wantPerNode: 1,
			wantJob: &job.Job{Command: []string{"make"}},
			want:    lease.Claim{GPUs: []int{2}, Duration: time.Hour, Kind: lease.KindInteractive, QueuedAt: t0, Run: &job.RunSpec{Command: []string{"make"}}}},
		{name: "a MIG instance names its GPU itself",
			claim: lease.Claim{MIG: "3g.40gb", Model: "H100", Duration: time.Hour},
			id:    "node01-q6", gpus: []int{2},
			wantNodes: 1, wantPerNode: 1, wantModel: "H100",
			want: lease.Claim{MIG: "3g.40gb", Model: "H100", Duration: time.Hour, Kind: lease.KindInteractive, QueuedAt: t0}},
		{name: "a memory budget on the placed GPU",
			claim: lease.Claim{MemMiB: 20480, Duration: time.Hour, Note: "notebook"},
			id:    "node01-q7", gpus: []int{1},
			wantNodes: 1, wantPerNode: 1,
			want: lease.Claim{GPUs: []int{1}, MemMiB: 20480, Duration: time.Hour, Kind: lease.KindInteractive, Note: "notebook", QueuedAt: t0}},
		{name: "the submit's model filter wins over the claim's",
			claim: lease.Claim{Count: 1, Model: "A100", Duration: time.Hour},
			ask:   queue.Ask{Model: "H100"},
			id:    "node01-q8", gpus: []int{0},
			wantNodes: 1, wantPerNode: 1, wantModel: "H100",
			want: lease.Claim{GPUs: []int{0}, Duration: time.Hour, Kind: lease.KindInteractive, QueuedAt: t0}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e, err := queue.NewEntry("node01", alice, tt.claim, tt.ask)
			if err != nil {
				t.Fatalf("NewEntry: %v", err)
			}
			e.ID, e.SubmittedAt = tt.id, t0 // as its origin does
			if err := e.Check(p); err != nil {
				t.Fatalf("Check: %v", err)
			}
			if e.Origin != "node01" || e.User != alice.User || e.UID != alice.UID {
				t.Errorf("entry of %s/%s uid %d, want node01/alice uid %d", e.Origin, e.User, e.UID, alice.UID)
			}
			if e.Nodes != tt.wantNodes || e.GPUsPerNode != tt.wantPerNode {
				t.Errorf("entry asks for %d×%d GPUs, want %d×%d", e.Nodes, e.GPUsPerNode, tt.wantNodes, tt.wantPerNode)
			}
			if e.Model != tt.wantModel || e.RequestID != tt.claim.RequestID || !reflect.DeepEqual(e.Tags, tt.claim.Tags) {
				t.Errorf("entry's model %q, request id %q, tags %v; want %q, %q, %v", e.Model, e.RequestID, e.Tags, tt.wantModel, tt.claim.RequestID, tt.claim.Tags)
			}
			if e.Requeue != tt.ask.Requeue || e.NoRequeue != tt.ask.NoRequeue {
				t.Errorf("entry's requeue %v / no-requeue %v, want %v / %v", e.Requeue, e.NoRequeue, tt.ask.Requeue, tt.ask.NoRequeue)
			}
			if !reflect.DeepEqual(e.Job, tt.wantJob) {
				t.Errorf("entry's job %+v, want %+v", e.Job, tt.wantJob)
			}
			got, err := e.RankClaim(tt.gpus, tt.rank)
			if err != nil {
				t.Fatalf("RankClaim: %v", err)
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("rank %d's claim\n got %+v (run %+v)\nwant %+v (run %+v)", tt.rank, got, got.Run, tt.want, tt.want.Run)
			}
			if err := got.Validate(); err != nil {
				t.Errorf("the rank's claim does not hold a claim's bounds: %v", err)
			}
		})
	}
}

// TestEntryClaimRefusals: what cannot be queued as asked, or started from
// the copy of an entry at hand, is refused with words saying why.
func TestEntryClaimRefusals(t *testing.T) {
	_, err := queue.NewEntry("node01", alice, lease.Claim{GPUs: []int{0, 1}, Duration: time.Hour}, queue.Ask{})
	checkRefusal(t, err, refusal.CodeInvalid, "a number of GPUs (-g N), not named ones")

	// Gossip's copy keeps only the job's public part; a start made from it
	// would run no command, so the node refuses it until the scheduler has
	// the origin's.
	e := queue.QueueEntry{ID: "node01-q1", Origin: "node01", User: "alice", Nodes: 1, GPUsPerNode: 1, Duration: time.Hour,
		Kind: lease.KindInteractive, Job: (&job.Job{Name: "train", Command: []string{"python", "train.py"}}).Public()}
	_, err = e.RankClaim([]int{0}, 0)
	checkRefusal(t, err, refusal.CodeUnavailable, "came without its command", "origin node01 keeps")
}
