package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/internal/daemoncmd"
)

// exitConfig is the status dibsd's agent exits with on a config it cannot
// start with; `dibs agent` hands over to dibsd, so the client's caller sees it.
const exitConfig = daemoncmd.ExitConfig

// TestAgentConfigErrorsExit78 is what the packaged unit relies on: an agent
// that cannot start with its config exits with EX_CONFIG (78), which
// RestartPreventExitStatus keeps systemd from restarting in a loop, and says
// in one line what to do — for the missing cluster key, the keygen step.
func TestAgentConfigErrorsExit78(t *testing.T) {
	dir := agenttest.PublicDir(t)
	missing := filepath.Join(dir, "etc", "cluster.key")
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no key file where the config says", []string{"--bind", "127.0.0.1:0", "--cluster-key-file", missing},
			"no cluster key at " + missing + ": make one on one node with `dibs keygen " + missing + "`"},
		{"gossip beyond loopback without a key", []string{"--bind", "0.0.0.0:0", "--join", "127.0.0.1:1"},
			"make a cluster key with `dibs keygen"},
		{"a config file that is not there", []string{"--config", filepath.Join(dir, "nope.toml")},
			"nope.toml"},
	}
	for i, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append([]string{"agent", "--sim", "1xL40S", "--data-dir", filepath.Join(dir, "d", tt.name)}, tt.args...)
			out, errOut, code := dibs(t, filepath.Join(dir, "s"+string(rune('a'+i))+".sock"), nil, args...)
			if code != exitConfig || !strings.Contains(errOut, tt.want) || strings.Count(errOut, "\n") != 1 {
				t.Errorf("exit %d, stderr %q, stdout %q; want exit %d and one line containing %q", code, errOut, out, exitConfig, tt.want)
			}
		})
	}
}
