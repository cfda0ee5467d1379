package tui

import (
	"os"
	"os/exec"
	"strings"

	tea "charm.land/bubbletea/v2"
)

// RunLocal runs the board on this process's own terminal until the person
// quits: `dibs` and `dibs tui` over the agent's socket, `dibsd demo` over
// the demo's. Attach suspends the board and runs tmux attach (or ssh) in the
// terminal, outside any tmux the board itself runs in. Over SSH the agent
// builds its program itself (agent/sshd), never through this.
func RunLocal(b Backend, noColor bool) error {
	m := New(Options{
		Backend: b,
		NoColor: noColor,
		Attach: func(argv []string) tea.Cmd {
			cmd := exec.Command(argv[0], argv[1:]...)
			cmd.Env = outsideTmux(os.Environ())
			return tea.ExecProcess(cmd, func(error) tea.Msg { return nil })
		},
	})
	_, err := tea.NewProgram(m).Run()
	return err
}

// outsideTmux drops TMUX from env, so tmux attaches instead of refusing to
// nest.
func outsideTmux(env []string) []string {
	out := make([]string, 0, len(env))
	for _, kv := range env {
		if !strings.HasPrefix(kv, "TMUX=") {
			out = append(out, kv)
		}
	}
	return out
}
