package job

import (
	"encoding/json"
	"maps"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

// A run's command starts in a fresh environment on the node (its user's
// home, the node's default PATH), not in the shell that typed `dibs run`.
// Without more, `conda activate x; dibs run -- python train.py` would run
// the system's python. So a run takes along the few variables that choose
// which programs and libraries a command finds: the caller's PATH and the
// ones a Python environment's activation sets. Nothing else travels (no
// tokens, no terminal or ssh variables): the list is fixed, and every
// agent refuses a name outside it.
var carriedEnv = []string{
	"PATH",
	"LD_LIBRARY_PATH",
	"PYTHONPATH",
	"VIRTUAL_ENV",
	"CONDA_PREFIX",
	"CONDA_DEFAULT_ENV",
	"CONDA_EXE",
	"CONDA_PYTHON_EXE",
	"CONDA_SHLVL",
	"CUDA_HOME",
}

// MaxJobEnvSize bounds the bytes of a run's carried variables, names and
// values together: they travel with the run to the node that starts it.
const MaxJobEnvSize = 8 << 10

// CarriedEnv returns the names of the variables a run takes along from
// the caller's shell, in a fixed order.
func CarriedEnv() []string { return slices.Clone(carriedEnv) }

// PickEnv returns the carried variables present in environ (os.Environ's
// form), empty ones left out.
func PickEnv(environ []string) map[string]string {
	out := map[string]string{}
	for _, kv := range environ {
		k, v, ok := strings.Cut(kv, "=")
		if ok && v != "" && slices.Contains(carriedEnv, k) {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Check is CheckJob and CheckEnv: every bound a job is held to, wherever
// it comes from.
func (j *Job) Check() error {
	if err := CheckJob(j.Command, j.Dir, j.Name); err != nil {
		return err
	}
	if err := CheckEnv(j.Env); err != nil {
		return err
	}
	if j.Kept && j.Private() {
		return refusal.Invalidf("a job marked kept carries its command, directory or environment")
	}
	return checkJobWire(j)
}

// MaxJobWireSize bounds a job as the agents send it (JSON, where a control
// character takes six bytes): what travels from the origin to the
// scheduler and on to the nodes that start it must fit one request
// (agent/peer.MaxBody) with room for the rest.
const MaxJobWireSize = 128 << 10

// checkJobWire refuses a job whose encoding passes MaxJobWireSize. Only a
// job that could (more than a sixth of the bound in raw bytes) is encoded
// to find out.
func checkJobWire(j *Job) error {
	raw := 32 + len(j.Dir) + len(j.Name) // 32×6 covers the field names and braces
	for _, a := range j.Command {
		raw += len(a) + 3
	}
	for k, v := range j.Env {
		raw += len(k) + len(v) + 6
	}
	if raw*6 <= MaxJobWireSize {
		return nil
	}
	b, err := json.Marshal(j)
	if err != nil {
		return refusal.Wrapf(refusal.CodeInvalid, err, "the command cannot be encoded: %v", err)
	}
	if len(b) > MaxJobWireSize {
		return refusal.Invalidf("the command, its directory and environment take %d bytes as the agents send them (control characters and quotes count six); at most %d: put the command in a script and run that", len(b), MaxJobWireSize)
	}
	return nil
}

// CheckEnv refuses a run's environment that holds a name outside
// CarriedEnv, a value with a NUL byte, a newline or invalid UTF-8, or more
// than MaxJobEnvSize bytes.
func CheckEnv(env map[string]string) error {
	size := 0
	for k, v := range env {
		if !slices.Contains(carriedEnv, k) {
			return refusal.Invalidf("environment variable %s does not travel with a run (only %s do): set it in the command, e.g. env %s=... CMD", words.QuoteInput(k), strings.Join(carriedEnv, ", "), words.QuoteInput(k))
		}
		if strings.ContainsAny(v, "\x00\n\r") || !utf8.ValidString(v) {
			return refusal.Invalidf("environment variable %s holds a NUL, a newline or invalid UTF-8", k)
		}
		// The same check every agent makes of an entry or a booking that
		// gossip brings: what one agent accepts, no other may refuse.
		if err := words.CheckText("environment variable "+k, v); err != nil {
			return err
		}
		size += len(k) + len(v)
	}
	if size > MaxJobEnvSize {
		return refusal.Invalidf("your %s add up to %d bytes; at most %d travel with a run: shorten them, or run with --clean-env", strings.Join(slices.Sorted(maps.Keys(env)), ", "), size, MaxJobEnvSize)
	}
	return nil
}

// MaxArrayIndex bounds an index of a job array's task.
const MaxArrayIndex = 99999

// ArrayTaskOf splits a task's id (node01-q7/5) into its array's id and its
// index; ok is false for any other id.
func ArrayTaskOf(id string) (array string, index int, ok bool) {
	i := strings.LastIndexByte(id, '/')
	if i <= 0 || i == len(id)-1 {
		return "", 0, false
	}
	n, err := strconv.Atoi(id[i+1:])
	if err != nil || n < 0 || n > MaxArrayIndex || strconv.Itoa(n) != id[i+1:] {
		return "", 0, false
	}
	return id[:i], n, true
}

// ArrayEnv is what a task's session is told of its array: DIBS_ARRAY_ID
// and DIBS_ARRAY_INDEX (SLURM's SLURM_ARRAY_JOB_ID and
// SLURM_ARRAY_TASK_ID), from the entry key a lease carries; nil for a
// lease of no task.
func ArrayEnv(entryKey string) map[string]string {
	id, _, _ := strings.Cut(entryKey, "#")
	arr, idx, ok := ArrayTaskOf(id)
	if !ok {
		return nil
	}
	return map[string]string{"DIBS_ARRAY_ID": arr, "DIBS_ARRAY_INDEX": strconv.Itoa(idx)}
}
