package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

func TestExampleConfigIsValid(t *testing.T) {
	fc, err := LoadFile(filepath.Join("..", "..", "docs", "examples", "dibs.toml"))
	if err != nil {
		t.Fatalf("docs/examples/dibs.toml: %v", err)
	}
	p, err := fc.Leases.Policy(lease.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	if p.MaxBatch != 7*24*time.Hour || p.AdminGroup != "dibs-admin" || len(fc.Cluster.Join) != 2 {
		t.Errorf("example config read as %+v / %+v", p, fc.Cluster)
	}
}

func TestConfigErrorsNameFileLineAndReason(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"unknown top key", "node_name = \"a\"\nprobe_intervall = \"1s\"\n", ":2: unknown key \"probe_intervall\""},
		{"unknown section key", "[leases]\ndefault_interactive = \"1h\"\nmax_fun = \"2h\"\n", ":3: unknown key \"leases.max_fun\""},
		{"bad duration", "[leases]\n\nwarn_before = \"soon\"\n", ":3: leases.warn_before: cannot read duration"},
		{"default over max", "[leases]\ndefault_batch = \"9d\"\n", "default_batch 9d is longer than max_batch"},
		{"bad action", "[leases]\nend_action = \"explode\"\n", ":2: leases.end_action"},
		{"bad probe interval", "probe_interval = \"1ms\"\n", ":1: probe_interval"},
		{"bad backend", "backend = \"cuda\"\n", ":1: backend"},
		{"bad join", "[cluster]\njoin = [\"a:b:c\"]\n", ":2: cluster.join"},
		{"bad node name", "node_name = \"no spaces\"\n", ":1: node_name"},
		{"bad event keep", "[events]\nkeep = \"forever\"\n", ":2: events.keep: cannot read duration"},
		{"event keep too short", "\n[events]\nkeep = \"10m\"\n", ":3: events.keep: 10m is less than an hour"},
		{"syntax", "node_name = \n", ":1:"},
		{"wrong type", "probe_interval = 5\n", "probe_interval"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "dibs.toml")
			os.WriteFile(path, []byte(tc.body), 0o644)
			_, err := LoadFile(path)
			if err == nil {
				t.Fatalf("config %q accepted, want an error", tc.body)
			}
			if !strings.HasPrefix(err.Error(), path) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %q, want it to start with the file and say %q", err, tc.want)
			}
		})
	}
}
