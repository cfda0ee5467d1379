package job

// Public is the part of j that travels in gossip and shows to people other
// than its holder: the session name, Torchrun, and Kept in place of the
// command, directory and environment. Nil for nil.
func (j *Job) Public() *Job {
	if j == nil {
		return nil
	}
	return &Job{Name: j.Name, Torchrun: j.Torchrun, Kept: j.Kept || len(j.Command) > 0}
}

// Private reports whether j holds its command, directory or environment,
// which Public leaves out.
func (j *Job) Private() bool {
	return j != nil && (len(j.Command) > 0 || j.Dir != "" || len(j.Env) > 0)
}

// RunsCommand reports whether the job runs a command (rather than opening
// a shell), whether this copy holds the command or only Public's part.
func (j *Job) RunsCommand() bool { return j != nil && (len(j.Command) > 0 || j.Kept) }
