// Package dibs_test holds the module's floor plan: which dibs packages and
// third-party modules each package may import, and what it must never link,
// checked against the imports `go list -deps` reports (the way tailscale's
// tstest/deptest does). The table is data in one place, floorPlan; `go test
// -run TestFloorPlan -v .` prints it as Markdown, and docs/architecture.md
// carries the same table (TestFloorPlanDoc keeps them equal; -update
// rewrites the doc). sizes_test.go beside it holds the size limits.
package dibs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// module is the module path; rooms name packages below it.
const module = "github.com/dibs-gpu/dibs"

// room is one package's row of the floor plan.
type room struct {
	pkg  string // path below the module; "." is the module root
	what string // what it holds, for the table in docs/architecture.md
	// may lists the dibs packages it may import itself. Each must have a
	// row above this one, so the table is the layering, bottom to top.
	may []string
	// mods lists the third-party modules it may import itself.
	mods []string
	// never lists what it must not link by any path: an import path, which
	// covers its sub-packages, or a prefix ending in "/". A dibs package is
	// written below the module, like pkg, and must have a row.
	never []string
	// notItself lists standard packages it must not import itself, though
	// what it imports may (the rules do no I/O; fmt still reaches os).
	notItself []string
}

// Third-party modules and packages the plan names.
const (
	goNVML     = "github.com/NVIDIA/go-nvml"
	memberlist = "github.com/hashicorp/memberlist"
	bbolt      = "go.etcd.io/bbolt"
	xsys       = "golang.org/x/sys"
	xcrypto    = "golang.org/x/crypto"
	sshPkg     = "golang.org/x/crypto/ssh"
	charm      = "charm.land/"
	charmX     = "github.com/charmbracelet/"
	bubbletea  = "charm.land/bubbletea/v2"
	wish       = "charm.land/wish/v2"
	kubernetes = "k8s.io/"
	sigsK8s    = "sigs.k8s.io/"
)

// agentOrder is the order of the daemon's own packages: each may import
// those before it.
func agentOrder() []string {
	return []string{"clock", "notify", "account", "events", "node", "proxy", "origin", "peer", "sched", "core", "sockapi", "sshd", "config", "metrics"}
}

// floorPlan is the import table of the module, bottom to top: every package
// has one row.
func floorPlan() []room {
	// The rules must stay pure: no gossip, no NVML, no terminals, no SSH, no
	// HTTP, no processes, and no I/O of their own.
	pure := []string{memberlist, goNVML, charm, charmX, sshPkg, "net/http", "os/exec"}
	noIO := []string{"os", "os/exec", "os/signal", "syscall", "net", "io/fs", "log", "path/filepath"}
	// The ground floor every room above the rules may use: refusals, and
	// people's words with the bounds of text; then jobs, built on them.
	ground := []string{"base/refusal", "base/words", "base/termsafe"}
	rules := slices.Concat(ground, []string{"job", "service", "runrecord", "lease", "queue", "event"})
	base := slices.Concat(rules, []string{"outgrow/doctor", "base/durable", "nodeprobe", "launch"})

	plan := []room{
		{pkg: "nodeprobe", what: "GPU snapshot types (Snapshot, GPU, Process, Probe, Options); no I/O",
			never: []string{goNVML, "os/exec", "net/http"}},
		{pkg: "nodeprobe/internal/warnonce", what: "a backend's problem logged once"},
		{pkg: "nodeprobe/procfs", what: "process owners, accounts and host facts from /proc",
			may: []string{"nodeprobe"}, never: []string{goNVML, "os/exec"}},
		{pkg: "nodeprobe/sim", what: "simulated GPUs and their scripted load",
			may: []string{"nodeprobe", "nodeprobe/procfs"}, never: []string{goNVML, "os/exec"}},
		{pkg: "nodeprobe/smi", what: "nvidia-smi backend (CSV, no cgo)",
			may: []string{"nodeprobe", "nodeprobe/internal/warnonce", "nodeprobe/procfs"}, never: []string{goNVML}},
		{pkg: "nodeprobe/nvml", what: "NVML backend (cgo): driver layer and prober",
			may: []string{"nodeprobe", "nodeprobe/internal/warnonce", "nodeprobe/procfs"}, mods: []string{goNVML},
			never: []string{"os/exec"}},
		{pkg: "nodeprobe/probe", what: "Open: picks the backend",
			may: []string{"nodeprobe", "nodeprobe/nvml", "nodeprobe/sim", "nodeprobe/smi"}},
		{pkg: "base/poll", what: "tests' waiting: a condition polled to a deadline, a window watched (tests only)"},
		{pkg: "base/prereq", what: "tests' prerequisites: a skip on a developer's machine, a failure under CI=true (tests only)"},
		{pkg: "nemesis/powercut", what: "a FUSE file system that loses what was not fsynced when the power is cut (tests only)",
			may: []string{"base/prereq"}, mods: []string{"github.com/hanwen/go-fuse/v2"}},
		{pkg: "base/durable", what: "files replaced durably (fsync, rename, fsync the directory); standard library only"},
		{pkg: "base/lograte", what: "refusal log lines rate-limited per source, with a count of those held back"},
		{pkg: "base/termsafe", what: "the one sanitizer for text from outside; standard library only"},
		{pkg: "base/chart", what: "sparklines and bars as text, ASCII when plain; standard library only",
			never: append(slices.Clone(pure), bbolt), notItself: noIO},
		{pkg: "base/columns", what: "a table cell's two rules for both binaries: empty as \"-\", cut with \"~\""},
		{pkg: "base/refusal", what: "the refusal vocabulary of every room: codes, and the error a person reads with its cause",
			never: append(slices.Clone(pure), bbolt), notItself: noIO},
		{pkg: "base/words", what: "people's words and the bounds of text: durations, times, quoted input, Max* limits, CheckText",
			may: []string{"base/refusal", "base/termsafe"}, never: append(slices.Clone(pure), bbolt), notItself: noIO},
		{pkg: "job", what: "what a run starts: Job, RunSpec, the carried environment, array tasks, container ids; no I/O",
			may: ground, never: append(slices.Clone(pure), bbolt, "lease"), notItself: noIO},
		{pkg: "runrecord", what: "the record of how GPUs were used: per-GPU samples in bounded memory, per-lease figures, verdicts; pure",
			may: []string{"nodeprobe"}, never: append(slices.Clone(pure), bbolt), notItself: noIO},
		// The rules of a lease know nothing of the queue or of events,
		// which are built on them.
		{pkg: "service", what: "the rules of a service: its definition, states, restarts with backoff, crash loops; no I/O",
			may: []string{"base/termsafe"}, never: append(slices.Clone(pure), bbolt, "lease", "queue", "event"), notItself: noIO},
		{pkg: "lease", what: "the rules of a lease: claims, the table, what is due, judging GPUs, policy, pools, placement, the ledger; no I/O",
			may: slices.Concat(ground, []string{"job", "nodeprobe", "runrecord", "service"}), never: append(slices.Clone(pure), bbolt, "queue", "event"), notItself: noIO},
		{pkg: "queue", what: "the rules of queued work: entries, fair-share, the scheduling pass, gangs, arrays, dependencies; no I/O",
			may: slices.Concat(ground, []string{"job", "lease", "nodeprobe"}), never: append(slices.Clone(pure), bbolt, "event"), notItself: noIO},
		{pkg: "event", what: "what happened: event kinds and their words, notices, notification settings; no I/O",
			may: slices.Concat(ground, []string{"job", "lease", "queue", "service"}), never: append(slices.Clone(pure), bbolt), notItself: noIO},
		{pkg: "store", what: "bbolt store behind queue.Store and event.EventStore",
			may: append(slices.Clone(rules), "base/durable"), mods: []string{bbolt}, never: pure},
		{pkg: "store/storetest", what: "a fault-injecting fake queue.Store for tests",
			may: append(slices.Clone(rules), "store"), never: pure},
		{pkg: "outgrow/doctor", what: "doctor's checks, figures and verdict: pure arithmetic",
			may: slices.Concat(ground, []string{"job", "lease", "queue", "nodeprobe"}), never: append(slices.Clone(pure), bbolt), notItself: noIO},
		{pkg: "outgrow/slurm", what: "slurm.conf, gres.conf and sbatch scripts from what dibs knows: pure text",
			may: slices.Concat(ground, []string{"job", "lease", "queue", "nodeprobe"}), never: append(slices.Clone(pure), bbolt), notItself: noIO},
		// The Kubernetes export writes YAML by hand: Kubernetes' own types
		// check it in its test only, and no binary links them.
		{pkg: "outgrow/k8s", what: "a service's Deployment and Service for kubectl apply: pure text",
			may: []string{"base/termsafe", "job", "service"}, never: append(slices.Clone(pure), bbolt, kubernetes, sigsK8s, "lease", "queue"), notItself: noIO},
		{pkg: "outgrow/replay", what: "the what-if simulator: dibs's own rules on simulated time",
			may: slices.Concat(ground, []string{"job", "lease", "queue", "nodeprobe", "nodeprobe/sim"}), never: append(slices.Clone(pure), bbolt), notItself: noIO},
		{pkg: "launch", what: "tmux sessions as a user; standard library, x/sys, nodeprobe's CPU lists and procfs's reads", may: []string{"nodeprobe", "nodeprobe/procfs"},
			mods: []string{xsys}, never: []string{memberlist, goNVML, charm, charmX}},
		{pkg: "launch/launchtest", what: "throwaway accounts for tests",
			may: []string{"launch", "base/prereq"}},
		{pkg: "gossip", what: "memberlist: node state out and in, requests between agents",
			may: slices.Concat(ground, []string{"base/lograte", "job", "lease", "queue", "nodeprobe"}), mods: []string{memberlist},
			never: []string{charm, charmX, goNVML, "launch"}, notItself: []string{"net/http", "os/exec"}},
		// The client speaks its few HTTP/1.1 requests by hand (api/transport.go):
		// net/http brings crypto/tls, x509 and HTTP/2 into every dibs command
		// (issue 22). The agent's server side, in agent/sockapi, keeps net/http.
		{pkg: "api", what: "local API types and Go client (HTTP+JSON over the unix socket)",
			may: slices.Concat(rules, []string{"outgrow/doctor", "nodeprobe"}), mods: []string{xsys},
			never: []string{charm, charmX, memberlist, goNVML, "net/http", "crypto/tls"}},
		{pkg: "tui", what: "bubbletea v2 board over api",
			may:  slices.Concat(ground, []string{"api", "base/chart", "job", "lease", "event", "nodeprobe", "service"}),
			mods: []string{"charm.land/bubbles/v2", bubbletea, "charm.land/lipgloss/v2", "github.com/charmbracelet/x/ansi"},
			never: []string{memberlist, goNVML, bbolt, wish, sshPkg, "github.com/charmbracelet/bubbletea",
				"agent", "gossip", "launch", "store"}},
	}

	agentWhat := map[string]string{
		"clock":   "Clock (wall, monotonic, tickers), real and fake",
		"notify":  "broadcast of \"something changed\"",
		"account": "uid and name to lease.Caller",
		"events":  "the event log, notices to every node, webhooks",
		"node":    "the node's single writer of leases",
		"proxy":   "the services proxy: one port per service, forwarding to its owner-checked replicas",
		"origin":  "queue entries submitted at this node",
		"peer":    "the typed protocol between agents",
		"sched":   "the scheduler loop",
		"core":    "the Service and the caller-bound view (tui.Backend)",
		"sockapi": "unix-socket HTTP front door",
		"sshd":    "SSH front door (wish)",
		"config":  "the agent's TOML config file",
		"metrics": "Prometheus metrics read from the service at scrape time",
	}
	var agents []string
	for _, name := range agentOrder() {
		r := room{pkg: "agent/" + name, what: agentWhat[name], may: slices.Concat(base, agents),
			mods: []string{xsys}, never: []string{goNVML, memberlist}}
		switch name {
		case "clock", "notify": // the bottom: nothing of dibs below them
			r.may = slices.Clone(agents)
		case "core":
			r.may = append(r.may, "api")
			// The service layer decides; the node's own room (agent/node) does
			// its network I/O (node.FreePort, node.InterfaceOf), the front
			// doors and gossip the rest.
			r.notItself = []string{"net", "net/http"}
		case "sockapi":
			r.may = append(r.may, "api", "base/lograte")
		case "sshd":
			r.may = append(r.may, "api", "tui", "base/lograte")
			r.mods = append(r.mods, bubbletea, "charm.land/ssh", wish, xcrypto)
		case "config":
			r.mods = append(r.mods, "github.com/BurntSushi/toml")
		case "metrics":
			r.may = append(r.may, "api")
			r.mods = append(r.mods, "github.com/prometheus/client_golang")
		}
		plan = append(plan, r)
		agents = append(agents, r.pkg)
	}
	plan = append(plan,
		room{pkg: "agent", what: "the daemon: composition of the rooms above",
			may:  slices.Concat(agents, rules, []string{"api", "gossip", "launch", "outgrow/doctor", "base/durable", "base/lograte", "store", "nodeprobe"}),
			mods: []string{xsys}, never: []string{goNVML}},
		room{pkg: "agent/agenttest", what: "real agents on loopback for any package's tests",
			may: slices.Concat([]string{"agent", "base/poll", "base/prereq"}, agents, rules, []string{"api", "launch", "launch/launchtest",
				"store", "nodeprobe", "nodeprobe/sim"}),
			mods: []string{xsys}, never: []string{goNVML}},
		room{pkg: "nemesis", what: "Jepsen-style proof: clients, faults and a checker over real agents (tests only)",
			may:  slices.Concat([]string{"agent", "agent/agenttest"}, agents, rules, []string{"api", "gossip", "store/storetest"}),
			mods: []string{"github.com/anishathalye/porcupine"}, never: []string{goNVML}},
		room{pkg: "demo", what: "four simulated agents and teammates in one process",
			may: slices.Concat([]string{"agent"}, agents, ground, []string{"api", "job", "launch", "lease",
				"nodeprobe", "nodeprobe/sim"}),
			never: []string{goNVML}},
	)
	// The daemon's commands may import everything except the test helpers
	// (and nodeprobe's internal package, which Go keeps to nodeprobe).
	var all []string
	for _, r := range plan {
		if !strings.HasSuffix(r.pkg, "test") && !strings.Contains(r.pkg, "/internal/") && r.pkg != "base/poll" && r.pkg != "nemesis" && r.pkg != "nemesis/powercut" {
			all = append(all, r.pkg)
		}
	}
	// The client a person runs every minute links none of the daemon: no
	// gossip, no store, no metrics, no SSH server, no NVML (issue 22: it
	// starts like squeue). It hands the daemon's verbs to dibsd.
	daemonParts := []string{memberlist, bbolt, "github.com/prometheus/", "google.golang.org/protobuf", sshPkg,
		wish, "charm.land/ssh", goNVML, "agent", "gossip", "store", "demo", "cmd/internal/daemoncmd"}
	return append(plan,
		room{pkg: "base/buildinfo", what: "the release a binary says it is: linker stamps, else the toolchain's record"},
		// The plan reads the default build, without the nvml tag: then
		// nothing compiles NVML's header, so the README's `go run ./cmd/dibsd
		// demo` and test command print no C compiler warnings. The release
		// builds dibsd with -tags nvml.
		room{pkg: "cmd/internal/daemoncmd", what: "dibsd's commands: agent, demo, probe, keygen, config check, the board",
			may:  append(all, "base/buildinfo"),
			mods: []string{"github.com/spf13/cobra", xsys}, never: []string{goNVML}},
		room{pkg: "cmd/dibsd", what: "the daemon's binary: dibsd agent (the dibs.service unit), demo, probe, keygen",
			may: []string{"cmd/internal/daemoncmd"}, never: []string{goNVML, kubernetes, sigsK8s}},
		room{pkg: "cmd/dibs", what: "the client: flags, tables, --json; hands the board and the daemon's verbs to dibsd",
			may: slices.Concat(rules, []string{"api", "base/buildinfo", "base/chart", "base/columns", "launch", "outgrow/doctor", "outgrow/k8s", "outgrow/replay", "outgrow/slurm",
				"nodeprobe"}),
			mods: []string{"github.com/spf13/cobra", "github.com/spf13/pflag", xsys},
			// Nor net/http and crypto/tls: its requests are plain HTTP/1.1 on
			// a unix socket, written by hand (api/transport.go). Nor the
			// board's libraries, whose inits ran for every command: dibs
			// hands the board to dibsd (cmd/internal/daemoncmd/board.go).
			never: append(slices.Clone(daemonParts), "net/http", "crypto/tls", "tui", charm, charmX, kubernetes, sigsK8s)},
		room{pkg: ".", what: "this floor plan and the size limits (tests only)"},
	)
}

// listed is the part of `go list -json` the plan needs.
type listed struct {
	ImportPath string
	Standard   bool
	Imports    []string
	Module     *struct{ Path string }
	Error      *struct{ Err string }
}

// goList returns every package the module's packages link, by import path,
// for this GOOS/GOARCH and cgo setting, as `go build` sees them.
func goList(t *testing.T) map[string]*listed {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("go list needs the go command, which go test puts in PATH: %v", err)
	}
	cmd := exec.Command(goBin, "list", "-deps", "-json=ImportPath,Standard,Imports,Module,Error", "./...")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -deps ./...: %v\n%s", err, stderr.Bytes())
	}
	g := make(map[string]*listed)
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listed
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		if p.Error != nil {
			t.Fatalf("go list: %s: %s", p.ImportPath, p.Error.Err)
		}
		g[p.ImportPath] = &p
	}
	return g
}

// full turns a path below the module into an import path.
func full(pkg string) string {
	if pkg == "." {
		return module
	}
	return module + "/" + pkg
}

// own reports whether path is a package of this module.
func own(path string) bool { return path == module || strings.HasPrefix(path, module+"/") }

// short is full's inverse, for messages and the table.
func short(path string) string {
	if path == module {
		return "."
	}
	return strings.TrimPrefix(path, module+"/")
}

// covers reports whether the plan entry pat (an import path, or a prefix
// ending in "/") covers path.
func covers(pat, path string) bool {
	if strings.HasSuffix(pat, "/") {
		return strings.HasPrefix(path, pat)
	}
	return path == pat || strings.HasPrefix(path, pat+"/")
}

// standard reports whether path is in the standard library ("C" is cgo's
// pseudo-package).
func standard(g map[string]*listed, path string) bool {
	if p := g[path]; p != nil {
		return p.Standard
	}
	return path == "C" || !strings.Contains(strings.Split(path, "/")[0], ".")
}

// moduleOf names the module a third-party package comes from.
func moduleOf(g map[string]*listed, path string) string {
	if p := g[path]; p != nil && p.Module != nil {
		return p.Module.Path
	}
	return path
}

// checkPlan returns one line per way the packages in g break the plan: a
// package without a row (or a row without a package), a row that may import
// one above it, an import the row does not allow, a package it must never
// link, with the chain of imports that brings it in.
func checkPlan(g map[string]*listed, plan []room) []string {
	var bad []string
	rows := make(map[string]int, len(plan))
	for i, r := range plan {
		if _, dup := rows[r.pkg]; dup {
			bad = append(bad, fmt.Sprintf("floor plan: %s has two rows", r.pkg))
		}
		rows[r.pkg] = i
		for _, m := range r.may {
			if j, ok := rows[m]; !ok || j >= i {
				bad = append(bad, fmt.Sprintf("floor plan: %s may import %s, which has no row above it (the table lists packages bottom to top)", r.pkg, m))
			}
		}
		if _, ok := g[full(r.pkg)]; !ok {
			bad = append(bad, fmt.Sprintf("floor plan: %s has a row but no such package: remove the row", r.pkg))
		}
	}
	for _, path := range slices.Sorted(maps.Keys(g)) {
		if _, ok := rows[short(path)]; own(path) && !ok {
			bad = append(bad, fmt.Sprintf("%s is not in the floor plan: add its row to floorPlan in floorplan_test.go and to docs/architecture.md (go test -run TestFloorPlanDoc -update .)", short(path)))
		}
	}
	for _, r := range plan {
		pkg := g[full(r.pkg)]
		if pkg == nil {
			continue
		}
		for _, imp := range pkg.Imports {
			switch {
			case own(imp):
				if !slices.Contains(r.may, short(imp)) {
					bad = append(bad, fmt.Sprintf("%s imports %s, which its row does not allow (may import: %s)", r.pkg, short(imp), listOr(r.may, "no dibs package")))
				}
			case standard(g, imp):
				if slices.Contains(r.notItself, imp) {
					bad = append(bad, fmt.Sprintf("%s imports %s itself, which its row forbids", r.pkg, imp))
				}
			default:
				if mod := moduleOf(g, imp); !slices.Contains(r.mods, mod) {
					bad = append(bad, fmt.Sprintf("%s imports %s (module %s), which its row does not allow (third-party: %s)", r.pkg, imp, mod, listOr(r.mods, "none")))
				}
			}
		}
		if len(r.never) == 0 {
			continue
		}
		parent := reach(g, full(r.pkg))
		for _, dep := range slices.Sorted(maps.Keys(parent)) {
			for _, n := range r.never {
				pat := n
				if _, ok := rows[n]; ok {
					pat = full(n) // a dibs package
				}
				// Name the package that brings it in, not each of its own.
				if covers(pat, dep) && !covers(pat, parent[dep]) {
					bad = append(bad, fmt.Sprintf("%s must never link %s: %s", r.pkg, n, chain(parent, dep)))
				}
			}
		}
	}
	return bad
}

// reach walks the import graph breadth-first from root and returns each
// reached package's parent on a shortest path (root's is "").
func reach(g map[string]*listed, root string) map[string]string {
	parent := map[string]string{root: ""}
	for queue := []string{root}; len(queue) > 0; queue = queue[1:] {
		p := g[queue[0]]
		if p == nil {
			continue
		}
		for _, imp := range p.Imports {
			if _, seen := parent[imp]; !seen {
				parent[imp] = queue[0]
				queue = append(queue, imp)
			}
		}
	}
	return parent
}

// chain spells the import path from the root to dep: "lease -> a -> b".
func chain(parent map[string]string, dep string) string {
	c := []string{short(dep)}
	for p := parent[dep]; p != ""; p = parent[p] {
		c = append([]string{short(p)}, c...)
	}
	return strings.Join(c, " -> ")
}

func listOr(l []string, none string) string {
	if len(l) == 0 {
		return none
	}
	return strings.Join(l, ", ")
}

// TestFloorPlan holds every package of the module to its row of floorPlan.
func TestFloorPlan(t *testing.T) {
	for _, msg := range checkPlan(goList(t), floorPlan()) {
		t.Error(msg)
	}
	if testing.Verbose() {
		t.Logf("the floor plan as docs/architecture.md shows it:\n\n%s", planMarkdown(floorPlan()))
	}
}

// TestFloorPlanCatches makes sure the check fails when it should, on a
// made-up module where the rules reach HTTP directly and a process runner
// through a helper, the board imports the daemon, the client pulls in
// memberlist, and a package has no row.
func TestFloorPlanCatches(t *testing.T) {
	std := func(path string, imports ...string) *listed {
		return &listed{ImportPath: path, Standard: true, Imports: imports}
	}
	third := func(path, mod string, imports ...string) *listed {
		return &listed{ImportPath: path, Module: &struct{ Path string }{mod}, Imports: imports}
	}
	g := map[string]*listed{}
	for _, p := range []*listed{
		{ImportPath: full("nodeprobe"), Imports: []string{"time"}},
		{ImportPath: full("lease"), Imports: []string{"fmt", "net/http", full("nodeprobe"), full("lease/util")}},
		{ImportPath: full("lease/util"), Imports: []string{"os/exec"}},
		{ImportPath: full("api"), Imports: []string{full("lease"), memberlist}},
		{ImportPath: full("agent"), Imports: []string{full("api")}},
		{ImportPath: full("tui"), Imports: []string{full("api"), full("agent")}},
		std("fmt", "os"), std("os"), std("time"), std("net/http", "os"), std("os/exec", "os"),
		third(memberlist, memberlist, "net"), std("net"),
	} {
		g[p.ImportPath] = p
	}
	plan := []room{
		{pkg: "nodeprobe"},
		{pkg: "lease", may: []string{"nodeprobe"}, never: []string{"net/http", "os/exec"}, notItself: []string{"os", "os/exec"}},
		{pkg: "api", may: []string{"lease"}, never: []string{memberlist}},
		{pkg: "tui", may: []string{"api", "agent"}, never: []string{"agent"}},
		{pkg: "agent", may: []string{"api"}},
		{pkg: "gone"},
	}
	want := []string{
		"floor plan: tui may import agent, which has no row above it (the table lists packages bottom to top)",
		"floor plan: gone has a row but no such package: remove the row",
		"lease/util is not in the floor plan: add its row to floorPlan in floorplan_test.go and to docs/architecture.md (go test -run TestFloorPlanDoc -update .)",
		"lease imports lease/util, which its row does not allow (may import: nodeprobe)",
		"lease must never link net/http: lease -> net/http",
		"lease must never link os/exec: lease -> lease/util -> os/exec",
		"api imports github.com/hashicorp/memberlist (module github.com/hashicorp/memberlist), which its row does not allow (third-party: none)",
		"api must never link github.com/hashicorp/memberlist: api -> github.com/hashicorp/memberlist",
		"tui must never link agent: tui -> agent",
	}
	if got := checkPlan(g, plan); !slices.Equal(got, want) {
		t.Errorf("checkPlan reported\n%s\nwant\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// planMarkdown renders the plan as the table docs/architecture.md shows.
func planMarkdown(plan []room) string {
	var b strings.Builder
	b.WriteString("| package | what it holds | may import (dibs) | may import (third-party) | must never link |\n")
	b.WriteString("| --- | --- | --- | --- | --- |\n")
	for _, r := range plan {
		never := code(r.never)
		if len(r.notItself) > 0 {
			if never == "—" {
				never = ""
			} else {
				never += "; "
			}
			never += "and not itself: " + code(r.notItself)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s | %s |\n", r.pkg, r.what, code(compact(r.may)), code(r.mods), never)
	}
	return b.String()
}

// code writes a list as comma-separated code spans, "—" when empty.
func code(l []string) string {
	if len(l) == 0 {
		return "—"
	}
	return "`" + strings.Join(l, "`, `") + "`"
}

// compact shortens runs of siblings, "agent/clock", "agent/notify", into
// "agent/{clock,notify}", so the daemon's rows stay readable.
func compact(l []string) []string {
	var out []string
	for i := 0; i < len(l); {
		dir, _, ok := cutLast(l[i])
		j := i + 1
		for ok && j < len(l) {
			if d, _, ok2 := cutLast(l[j]); !ok2 || d != dir {
				break
			}
			j++
		}
		if j-i < 3 {
			out = append(out, l[i])
			i++
			continue
		}
		var names []string
		for _, p := range l[i:j] {
			_, n, _ := cutLast(p)
			names = append(names, n)
		}
		out = append(out, dir+"/{"+strings.Join(names, ",")+"}")
		i = j
	}
	return out
}

func cutLast(p string) (dir, name string, ok bool) {
	i := strings.LastIndexByte(p, '/')
	if i < 0 {
		return "", p, false
	}
	return p[:i], p[i+1:], true
}

var update = flag.Bool("update", false, "rewrite the floor-plan table in docs/architecture.md")

// The markers around the generated table in docs/architecture.md.
const (
	docPath  = "docs/architecture.md"
	docBegin = "<!-- floorplan:begin (generated by floorplan_test.go: go test -run TestFloorPlanDoc -update .) -->\n"
	docEnd   = "<!-- floorplan:end -->\n"
)

// TestFloorPlanDoc keeps the table in docs/architecture.md exactly what
// TestFloorPlan enforces.
func TestFloorPlanDoc(t *testing.T) {
	doc, err := os.ReadFile(docPath)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(doc), docBegin)
	_, after, ok2 := strings.Cut(rest, docEnd)
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the floor-plan markers %q and %q", docPath, docBegin, docEnd)
	}
	want := before + docBegin + planMarkdown(floorPlan()) + docEnd + after
	if want == string(doc) {
		return
	}
	if *update {
		if err := os.WriteFile(docPath, []byte(want), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("the floor-plan table in %s is not the one floorplan_test.go enforces: run go test -run TestFloorPlanDoc -update .", docPath)
}
