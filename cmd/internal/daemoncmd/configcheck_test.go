package daemoncmd

import (
	"errors"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/agent/config"
)

// TestLoopbackWarnings: `dibs config check` warns when a clustered
// config's bind, advertise or join is loopback, which no other node can
// reach (issue 30: such a config checked "ok" and formed no cluster), and
// says nothing of a good config or of this node's own name resolving to
// 127.0.1.1.
func TestLoopbackWarnings(t *testing.T) {
	hosts := map[string][]string{
		"node01": {"127.0.1.1"}, // this node, through Debian's /etc/hosts line
		"node02": {"127.0.1.1"}, // another node, wrongly
		"node03": {"10.0.0.13"},
		"both":   {"127.0.0.1", "10.0.0.14"},
	}
	resolve := func(h string) ([]string, error) {
		if a, ok := hosts[h]; ok {
			return a, nil
		}
		return nil, errors.New("no such host")
	}
	tests := []struct {
		name string
		cc   config.ClusterConfig
		want []string // one substring per warning, in order
	}{
		{"good", config.ClusterConfig{KeyFile: "k", Join: []string{"node01", "node03", "both", "10.0.0.12:7946"}}, nil},
		{"no cluster", config.ClusterConfig{}, nil},
		{"bind loopback", config.ClusterConfig{KeyFile: "k", Bind: "127.0.0.1", Join: []string{"node03"}},
			[]string{`[cluster] bind = "127.0.0.1" is a loopback address`}},
		{"advertise ::1", config.ClusterConfig{KeyFile: "k", Advertise: "[::1]:7946"},
			[]string{`[cluster] advertise = "[::1]:7946" is a loopback address`}},
		{"join localhost and 127.0.0.1", config.ClusterConfig{KeyFile: "k", Join: []string{"localhost", "127.0.0.1:7947"}},
			[]string{`join lists "localhost", a loopback address`, `join lists "127.0.0.1:7947", a loopback address`}},
		{"join a name that resolves to loopback", config.ClusterConfig{KeyFile: "k", Join: []string{"node01", "node02", "node03"}},
			[]string{"join lists node02, which resolves here only to loopback (127.0.1.1)"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := loopbackWarnings(config.FileConfig{Cluster: tc.cc}, "node01", resolve)
			if len(got) != len(tc.want) {
				t.Fatalf("warnings %q, want %d like %q", got, len(tc.want), tc.want)
			}
			for i, w := range tc.want {
				if !strings.Contains(got[i], w) || !strings.Contains(got[i], "cluster") {
					t.Errorf("warning %d is %q, want it to say %q", i, got[i], w)
				}
			}
		})
	}
}
