package job_test

import (
	"reflect"
	"testing"

	"github.com/dibs-gpu/dibs/job"
)

// TestJobForExport: the job a node keeps for `dibs export sbatch` is the one
// asked for, launcher included, without the carried environment, and its
// command is its own copy.
func TestJobForExport(t *testing.T) {
	j := &job.Job{Command: []string{"python", "train.py"}, Dir: "/home/alice", Name: "train", Torchrun: true,
		Env: map[string]string{"PATH": "/usr/bin"}}
	got := j.ForExport()
	want := &job.Job{Command: []string{"python", "train.py"}, Dir: "/home/alice", Name: "train", Torchrun: true}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("ForExport = %+v, want %+v", got, want)
	}
	j.Command[0] = "bash"
	if got.Command[0] != "python" {
		t.Errorf("the kept job's command changed with the submitted one: %v", got.Command)
	}
	if (*job.Job)(nil).ForExport() != nil {
		t.Errorf("ForExport of no job is not nil")
	}
}
