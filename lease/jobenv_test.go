package lease_test

import (
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/lease"
)

func TestPickEnvTakesOnlyTheCarriedVariables(t *testing.T) {
	got := lease.PickEnv([]string{"PATH=/v/bin:/usr/bin", "VIRTUAL_ENV=/v", "WANDB_API_KEY=secret", "SSH_AUTH_SOCK=/tmp/x",
		"CUDA_VISIBLE_DEVICES=3", "CONDA_PREFIX=", "TERM=xterm", "noequals"})
	if len(got) != 2 || got["PATH"] != "/v/bin:/usr/bin" || got["VIRTUAL_ENV"] != "/v" {
		t.Errorf("PickEnv = %v, want PATH and VIRTUAL_ENV only", got)
	}
	if lease.PickEnv([]string{"HOME=/root"}) != nil {
		t.Error("PickEnv of nothing carried is not nil")
	}
}

func TestCheckEnv(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string // "" means accepted
	}{
		{"none", nil, ""},
		{"a venv", map[string]string{"PATH": "/v/bin:/bin", "VIRTUAL_ENV": "/v"}, ""},
		{"a name outside the list", map[string]string{"LD_PRELOAD": "/x.so"}, `environment variable "LD_PRELOAD" does not travel with a run`},
		{"a lowercase twin", map[string]string{"path": "/x"}, "does not travel"},
		{"a newline", map[string]string{"PATH": "/bin\nX=1"}, "NUL, a newline or invalid UTF-8"},
		{"a NUL", map[string]string{"PATH": "/bin\x00"}, "NUL"},
		{"invalid UTF-8", map[string]string{"PATH": "/\xff"}, "invalid UTF-8"},
		{"an escape sequence", map[string]string{"VIRTUAL_ENV": "/v\x1b]0;pwned\x07"}, "environment variable VIRTUAL_ENV holds"},
		{"a bidi control", map[string]string{"PATH": "/bin:/\u202etmp"}, "environment variable PATH holds"},
		{"too long", map[string]string{"PATH": strings.Repeat("/x", 5000)}, "at most 8192 travel with a run"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := lease.CheckEnv(tc.env)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("CheckEnv = %v, want an error saying %q", err, tc.want)
			}
		})
	}
}
