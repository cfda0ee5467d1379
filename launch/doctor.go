package launch

// TmuxPath is the tmux binary this launcher starts sessions with, or the
// reason it has none, for `dibs doctor`'s check that every node can start
// sessions.
func (l *Launcher) TmuxPath() (string, error) { return l.tmux, l.tmuxErr }
