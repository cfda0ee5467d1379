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
		// The installed guide, not the source tree's docs/ (issue 30).
		{"unknown key names the installed guide", "probe_intervall = \"1s\"\n", "(the keys dibs reads: /usr/share/doc/dibs/operations.md"},
		{"unknown section key", "[leases]\ndefault_interactive = \"1h\"\nmax_fun = \"2h\"\n", ":3: unknown key \"leases.max_fun\""},
		{"bad duration", "[leases]\n\nwarn_before = \"soon\"\n", ":3: leases.warn_before: cannot read duration"},
		{"default over max", "[leases]\ndefault_batch = \"9d\"\n", "default_batch 9d is longer than max_batch"},
		{"bad action", "[leases]\nend_action = \"explode\"\n", ":2: leases.end_action"},
		{"bad probe interval", "probe_interval = \"1ms\"\n", ":1: probe_interval"},
		{"bad backend", "backend = \"cuda\"\n", ":1: backend"},
		{"bad join", "[cluster]\njoin = [\"a:b:c\"]\n", ":2: cluster.join"},
		{"bad node name", "node_name = \"no spaces\"\n", ":1: node_name"},
		{"bad webhook allowlist", "[events]\nwebhook_allow = [\"http://x/\"]\n", "events.webhook_allow: \"http://x/\" is not a host name"},
		{"short ledger keep", "[events]\nledger_keep = \"7d\"\n", "events.ledger_keep: 7d is less than 90d"},
		{"negative ledger budget", "[events]\nledger_per_user_day = -5\n", "events.ledger_per_user_day: -5 must not be negative"},
		{"negative event budget", "[events]\nper_user_hour = -1\n", "events.per_user_hour: -1 must not be negative"},
		{"negative pre-auth cap", "[ssh]\nmax_pre_auth = -1\n", "ssh.max_pre_auth: -1 must not be negative"},
		{"metrics without a port", "[metrics]\n\nlisten = \"127.0.0.1\"\n", `:3: metrics.listen: "127.0.0.1" is not HOST:PORT`},
		{"metrics with a bad port", "[metrics]\nlisten = \":http-alt\"\n", `:2: metrics.listen: ":http-alt" has a bad port`},
		{"unknown metrics key", "[metrics]\nport = 9477\n", `:2: unknown key "metrics.port"`},
		{"bad event keep", "[events]\nkeep = \"forever\"\n", ":2: events.keep: cannot read duration"},
		{"event keep too short", "\n[events]\nkeep = \"10m\"\n", ":3: events.keep: 10m is less than an hour"},
		{"bad proxy range", "[services]\nproxy = true\nproxy_ports = \"30000\"\n", `:3: services.proxy_ports: "30000" is not a range FIRST-LAST such as 30000-30099`},
		{"proxy range of one port", "[services]\nproxy_ports = \"30000-30000\"\n", ":2: services.proxy_ports: 30000-30000 must be FIRST-LAST with 1 <= FIRST < LAST <= 65535"},
		{"bad proxy idle", "[services]\nproxy_idle = \"soon\"\n", `:2: services.proxy_idle: "soon" is not a duration`},
		{"negative proxy bound", "[services]\nproxy_max_conns = -1\n", ":2: services.proxy_max_conns: the proxy's bounds must not be negative"},
		{"syntax", "node_name = \n", ":1:"},
		{"wrong type", "probe_interval = 5\n", "probe_interval"},
		{"bad tag", "tags = [\"h100\", \"no spaces\"]\n", ":1: tags: pool or tag \"no spaces\""},
		{"bad pool time", "[pools.h100]\nusers = [\"alice\"]\nmax_time = \"forever\"\n", ":3: pools.h100.max_time: cannot read duration"},
		{"bad pool user", "[pools.h100]\nusers = [\"al ice\"]\n", ":2: pools.h100.users"},
		{"bad book ahead", "[leases]\nbook_ahead = \"-1d\"\n", ":2: leases.book_ahead"},
		{"bad book length", "[leases]\nbook_max_length = \"-1d\"\n", ":2: leases.book_max_length"},
		{"negative book count", "[leases]\nbook_max_count = -1\n", ":2: leases.book_max_count"},
		{"negative queue cap", "[queue]\nmax_queued_per_user = -3\n", ":2: queue.max_queued_per_user: -3 is negative"},
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

func TestMetricsListenIsReadAndOffByDefault(t *testing.T) {
	dir := t.TempDir()
	on := filepath.Join(dir, "on.toml")
	os.WriteFile(on, []byte("[metrics]\nlisten = \"127.0.0.1:9477\"\n"), 0o644)
	fc, err := LoadFile(on)
	if err != nil || fc.Metrics.Listen != "127.0.0.1:9477" {
		t.Errorf("[metrics] listen = %q (%v), want 127.0.0.1:9477", fc.Metrics.Listen, err)
	}
	off := filepath.Join(dir, "off.toml")
	os.WriteFile(off, []byte("node_name = \"n1\"\n"), 0o644)
	if fc, err := LoadFile(off); err != nil || fc.Metrics.Listen != "" {
		t.Errorf("no [metrics]: listen = %q (%v), want off", fc.Metrics.Listen, err)
	}
}

func TestTagsAndPools(t *testing.T) {
	path := filepath.Join(t.TempDir(), "dibs.toml")
	os.WriteFile(path, []byte(`tags = ["h100", "nvlink"]

[leases]
book_ahead = "14d"
book_max_gpu_hours = 48
book_max_length = "1d"
book_max_count = 4
service_gpus_per_user = 1
service_gpus = 3
service_pools = ["inference"]

[pools.h100]
max_time = "8h"
users = ["alice", "bob"]
max_gpus = 4
`), 0o644)
	fc, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	pools, err := fc.PoolLimits()
	if err != nil {
		t.Fatal(err)
	}
	p, err := fc.Leases.Policy(lease.DefaultPolicy())
	if err != nil {
		t.Fatal(err)
	}
	h := pools["h100"]
	if len(fc.Tags) != 2 || h.MaxTime != 8*time.Hour || h.MaxGPUs != 4 || len(h.Users) != 2 || p.BookAhead != 14*24*time.Hour || p.BookMaxGPUHours != 48 ||
		p.BookMaxLength != 24*time.Hour || p.BookMaxCount != 4 {
		t.Errorf("read tags %v, pool %+v, book ahead %s, max %g, longest %s, count %d", fc.Tags, h, p.BookAhead, p.BookMaxGPUHours, p.BookMaxLength, p.BookMaxCount)
	}
	if p.ServiceGPUsPerUser != 1 || p.ServiceGPUs != 3 || len(p.ServicePools) != 1 || p.ServicePools[0] != "inference" {
		t.Errorf("services: per user %d, cluster %d, pools %v, want 1, 3, [inference]", p.ServiceGPUsPerUser, p.ServiceGPUs, p.ServicePools)
	}
}
