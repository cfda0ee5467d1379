// Package job holds what a run starts, apart from the lease it runs under:
// the Job a queued run carries (its command, directory, session name and
// the environment carried from the submitter's shell), the RunSpec a claim
// or a booking starts on its GPUs, array task ids, and the ids of the
// containers a lease adopts. It has no I/O; lease, queue and the agent
// build on it.
package job

import (
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

// Job is what a queued run starts when its turn comes. A queued claim
// (`dibs claim --queue`) has none.
type Job struct {
	Command []string `json:"command,omitempty"`
	Dir     string   `json:"dir,omitempty"`
	Name    string   `json:"name,omitempty"`
	// Torchrun wraps Command in torchrun with the gang's rendezvous.
	Torchrun bool `json:"torchrun,omitempty"`
	// PerGPU starts Command once per GPU of each rank's lease, each copy
	// with its own RANK and LOCAL_RANK (queue.PerGPUCommand), as srun does.
	PerGPU bool `json:"per_gpu,omitempty"`
	// Env is what the submitter's shell had of CarriedEnv (PATH, the
	// Python environment), set in every rank's session.
	Env map[string]string `json:"env,omitempty"`
	// Kept marks a copy from which the command, directory and environment
	// were left out (Job.Public): gossip and views for anyone but the
	// holder. The job runs a command; its origin (or its booking's node)
	// holds it.
	Kept bool `json:"kept,omitempty"`
}

// EachString visits every string of a job (none for a nil one), for
// Lease.EachString and queue.QueueEntry.EachString; an environment value
// is visited as "env" and may be replaced too.
func (j *Job) EachString(f func(field string, p *string)) {
	if j == nil {
		return
	}
	for i := range j.Command {
		f("command", &j.Command[i])
	}
	f("dir", &j.Dir)
	f("name", &j.Name)
	for k, v := range j.Env {
		w := v
		f("env", &w)
		if w != v { // written only when replaced: checks share the map
			j.Env[k] = w
		}
	}
}

// Spec is a booked job as the run that starts it in session name: the
// inverse of RunSpec.Job, for the node that starts a booking at its time.
func (j *Job) Spec(name string) *RunSpec {
	return &RunSpec{Name: name, Command: j.Command, Dir: j.Dir, Env: j.Env}
}

// ForExport is the job as a node keeps it once its session starts, for
// `dibs export sbatch` to write back after it ends: the command (a copy),
// directory, name and launcher as asked, without the carried environment,
// which the node does not keep. Nil for nil.
func (j *Job) ForExport() *Job {
	if j == nil {
		return nil
	}
	return &Job{Command: slices.Clone(j.Command), Dir: j.Dir, Name: j.Name, Torchrun: j.Torchrun, PerGPU: j.PerGPU}
}

// SessionName is the tmux session a run under lease id gets when its holder
// names none.
func SessionName(id string) string {
	return "dibs-" + strings.NewReplacer(".", "_", ":", "_").Replace(id)
}

// CheckJob bounds a command line, its directory and session name.
func CheckJob(command []string, dir, name string) error {
	if len(command) > words.MaxCommandArgs {
		return refusal.Invalidf("the command has %d arguments; at most %d", len(command), words.MaxCommandArgs)
	}
	size := 0
	for _, a := range command {
		size += len(a)
		if strings.IndexByte(a, 0) >= 0 || !utf8.ValidString(a) {
			return refusal.Invalidf("the command holds a NUL byte or invalid UTF-8")
		}
	}
	if size > words.MaxCommandSize {
		return refusal.Invalidf("the command is %d bytes; at most %d", size, words.MaxCommandSize)
	}
	if len(command) > 0 && command[0] == "" {
		return refusal.Invalidf("the command is empty")
	}
	if dir != "" && (len(dir) > words.MaxPathLen || !strings.HasPrefix(dir, "/") || strings.IndexByte(dir, 0) >= 0) {
		return refusal.Invalidf("working directory %s must be an absolute path", words.QuoteInput(dir))
	}
	if name != "" && !words.ValidToken(name, words.MaxNameLen) {
		return refusal.Invalidf("session name %s must be one word of at most %d characters", words.QuoteInput(name), words.MaxNameLen)
	}
	return nil
}
