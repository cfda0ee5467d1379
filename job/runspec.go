package job

// RunSpec is the session a claim (or a booking) starts on its GPUs, as the
// person asked for it: the one shape of a run from the local API
// (api.RunSpec) through the agents' protocol (agent/peer.Run) to the node
// that starts it. Its JSON names are both wires'.
type RunSpec struct {
	// Name of the tmux session; empty means one derived from the lease id.
	Name string `json:"name,omitempty"`
	// Command to run; empty means the user's login shell.
	Command []string `json:"command,omitempty"`
	// Dir is the working directory; empty means the user's home.
	Dir string `json:"dir,omitempty"`
	// Env is what the caller's shell has of CarriedEnv (PATH, the Python
	// environment), for the command to find what it found there.
	Env map[string]string `json:"env,omitempty"`
}

// Check is every bound a run spec is held to, its size as the agents send
// it too; nil (no run) passes. Whether tmux keeps its name as given is the
// launcher's rule (launch.CheckName), checked by the agent beside it.
func (r *RunSpec) Check() error {
	if r == nil {
		return nil
	}
	return r.Job().Check()
}

// Job is the run as a job: what a booking keeps and `dibs export sbatch`
// writes back.
func (r *RunSpec) Job() *Job {
	return &Job{Command: r.Command, Dir: r.Dir, Name: r.Name, Env: r.Env}
}
