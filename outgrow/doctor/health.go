package doctor

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// Report is what one agent says of itself when `dibs doctor` asks.
type Report struct {
	Node     string    `json:"node"`
	Version  string    `json:"version"`
	Protocol int       `json:"protocol"`
	Wall     time.Time `json:"wall"`
	// Cluster is empty when the agent runs alone.
	Cluster ClusterFacts `json:"cluster"`
	SSHAddr string       `json:"ssh_addr,omitempty"`
	// Tmux is the tmux binary the agent starts sessions with; TmuxError
	// says why there is none.
	Tmux      string `json:"tmux,omitempty"`
	TmuxError string `json:"tmux_error,omitempty"`
	// Backend is the GPU probe (nvml, nvidia-smi, sim) and BackendWhy
	// why that one.
	Backend    string `json:"backend"`
	BackendWhy string `json:"backend_why,omitempty"`
	// NoLocalCPUs: none of the node's GPUs reports its local cores, so
	// its sessions run on any core (lease.CoresUnknown). Older agents
	// leave it out.
	NoLocalCPUs bool `json:"no_local_cpus,omitempty"`
	// DataDir holds the lease store; DiskFree and DiskTotal are its file
	// system's bytes (DiskError: why they are unknown).
	DataDir   string `json:"data_dir,omitempty"`
	DiskFree  uint64 `json:"disk_free"`
	DiskTotal uint64 `json:"disk_total"`
	DiskError string `json:"disk_error,omitempty"`
	// Overdue are this node's leases past their end; Squatted its GPUs
	// with processes that have no business there.
	Overdue  []LeaseFact `json:"overdue,omitempty"`
	Squatted []SquatFact `json:"squatted,omitempty"`
	// StraySessions are tmux sessions dibs started (named dibs-…) that no
	// lease holds; Sessionless are leases whose session is gone.
	StraySessions []SessionFact `json:"stray_sessions,omitempty"`
	Sessionless   []LeaseFact   `json:"sessionless,omitempty"`
}

// ClusterFacts are an agent's gossip settings.
type ClusterFacts struct {
	Name      string `json:"name,omitempty"`
	Encrypted bool   `json:"encrypted"`
	// KeyID is a short hash of the cluster key (never the key), so nodes
	// can be compared.
	KeyID           string `json:"key_id,omitempty"`
	GossipAddr      string `json:"gossip_addr,omitempty"`
	DecryptFailures uint64 `json:"decrypt_failures,omitempty"`
}

// LeaseFact names a lease for a check. For is how long it has been so
// (past its end, without its session), by the reporting node's clock, so a
// skewed clock does not skew it.
type LeaseFact struct {
	Lease   string        `json:"lease"`
	User    string        `json:"user"`
	GPUs    []int         `json:"gpus"`
	Session string        `json:"session,omitempty"`
	For     time.Duration `json:"for_ns"`
}

// SquatFact is a squatted GPU: the processes' owners and how long it has
// been seen squatted (zero: not known), by the reporting node's clock.
type SquatFact struct {
	GPU    int           `json:"gpu"`
	Holder string        `json:"holder,omitempty"`
	Users  []string      `json:"users"`
	PIDs   []int         `json:"pids"`
	For    time.Duration `json:"for_ns"`
}

// SessionFact is a user's tmux session.
type SessionFact struct {
	User    string `json:"user"`
	Session string `json:"session"`
}

// Bounds on a report from another agent.
const (
	maxFacts = 1024
	maxText  = 512
)

// Validate bounds a report from another agent: sizes, names, times.
func (r *Report) Validate() error {
	if err := words.ValidNodeName(r.Node); err != nil {
		return err
	}
	for _, s := range []string{r.Version, r.SSHAddr, r.Tmux, r.TmuxError, r.Backend, r.BackendWhy, r.DataDir, r.DiskError,
		r.Cluster.Name, r.Cluster.KeyID, r.Cluster.GossipAddr} {
		if len(s) > maxText {
			return fmt.Errorf("report of %s holds a field of %d bytes", r.Node, len(s))
		}
		if err := words.CheckText("report field", s); err != nil {
			return fmt.Errorf("report of %s: %w", r.Node, err)
		}
	}
	if r.Protocol < 0 || r.Protocol > 255 || !words.ValidSince(r.Wall) {
		return fmt.Errorf("report of %s has a bad protocol or clock", r.Node)
	}
	if len(r.Overdue) > maxFacts || len(r.Squatted) > maxFacts || len(r.StraySessions) > maxFacts || len(r.Sessionless) > maxFacts {
		return fmt.Errorf("report of %s lists too much", r.Node)
	}
	for _, l := range slices.Concat(r.Overdue, r.Sessionless) {
		if _, ok := lease.NodeOfID(l.Lease); !ok || !words.ValidUserName(l.User) || lease.CheckGPUs(l.GPUs) != nil || l.For < 0 || len(l.Session) > words.MaxNameLen {
			return fmt.Errorf("report of %s names a bad lease", r.Node)
		}
	}
	for _, q := range r.Squatted {
		if q.GPU < 0 || q.GPU >= words.MaxGPUIndex || len(q.Users) > 64 || len(q.PIDs) > 64 || q.For < 0 || (q.Holder != "" && !words.ValidUserName(q.Holder)) {
			return fmt.Errorf("report of %s names a bad squatter", r.Node)
		}
		for _, u := range q.Users {
			if len(u) > words.MaxUserNameLen || words.CheckText("user", u) != nil {
				return fmt.Errorf("report of %s names a bad squatter", r.Node)
			}
		}
	}
	for _, s := range r.StraySessions {
		if !words.ValidUserName(s.User) || len(s.Session) > words.MaxNameLen || words.CheckText("session", s.Session) != nil {
			return fmt.Errorf("report of %s names a bad session", r.Node)
		}
	}
	return nil
}

// NodeHealth is one node as `dibs doctor` found it: what the asking agent
// saw of it (membership, whether it answered, the round trip and the clock
// skew) and, when it answered, its report.
type NodeHealth struct {
	Node  string `json:"node"`
	Self  bool   `json:"self,omitempty"`
	State string `json:"state"`
	// Since is when it stopped being a member (zero while it is one).
	Since   time.Time     `json:"since,omitzero"`
	Reached bool          `json:"reached"`
	Error   string        `json:"error,omitempty"`
	RTT     time.Duration `json:"rtt_ns"`
	// Skew is its wall clock minus the asker's at the middle of the round
	// trip: positive when it is ahead.
	Skew   time.Duration `json:"skew_ns"`
	Report *Report       `json:"report,omitempty"`
}

// Check is one line of `dibs doctor`: what was checked, how it stands,
// what was found and, unless it is fine, what to do.
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"`
	Node   string `json:"node,omitempty"`
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// Check statuses.
const (
	OK   = "ok"
	Warn = "warn"
	Fail = "fail"
)

// Thresholds of the health checks.
const (
	SkewWarn       = 2 * time.Second
	SkewFail       = time.Minute
	DiskWarnBytes  = 1 << 30
	DiskFailBytes  = 100 << 20
	DiskWarnShare  = 0.05
	OverdueWarn    = time.Hour
	SquatLongAfter = 30 * time.Minute
)

// Check names, in the order they print.
var CheckNames = []string{"agents", "version", "clock", "cluster", "ports", "tmux", "probe", "disk", "leases", "sessions"}

// Checks runs every health check over the nodes and returns them in
// CheckNames order: for each, one line per problem found, or one "ok" line
// saying what was checked.
func Checks(nodes []NodeHealth, now time.Time) []Check {
	var out []Check
	reached := slices.DeleteFunc(slices.Clone(nodes), func(n NodeHealth) bool { return !n.Reached || n.Report == nil })
	names := func(ns []NodeHealth) string {
		s := make([]string, len(ns))
		for i, n := range ns {
			s[i] = n.Node
		}
		return strings.Join(s, ", ")
	}
	add := func(name string, problems []Check, okDetail string) {
		if len(problems) == 0 {
			out = append(out, Check{Name: name, Status: OK, Detail: okDetail})
			return
		}
		for _, p := range problems {
			p.Name = name
			out = append(out, p)
		}
	}

	// agents: every member answered.
	var ps []Check
	for _, n := range nodes {
		switch {
		case n.Reached:
		case n.State == queue.NodeRestarting:
			since := ""
			if !n.Since.IsZero() {
				since = " since " + n.Since.Local().Format("15:04:05")
			}
			ps = append(ps, Check{Status: Warn, Node: n.Node, Detail: fmt.Sprintf("%s is restarting%s: its agent is away, and the others keep its leases and gangs for the grace (queue.lost_after)", n.Node, since),
				Fix: fmt.Sprintf("nothing, if it is being restarted or upgraded; else start its agent on %s (`sudo systemctl start dibs`) before the grace runs out", n.Node)})
		case n.State != queue.NodeAlive && n.State != "":
			since := ""
			if !n.Since.IsZero() {
				since = " since " + n.Since.Local().Format("Jan 2 15:04")
			}
			ps = append(ps, Check{Status: Fail, Node: n.Node, Detail: fmt.Sprintf("%s is %s%s: its GPUs show as unknown and nobody can claim them", n.Node, n.State, since),
				Fix: fmt.Sprintf("start its agent on %s (`sudo systemctl start dibs`); if it was retired, `dibs ls` stops showing it once the others forget it", n.Node)})
		case strings.Contains(n.Error, "unknown request"):
			ps = append(ps, Check{Status: Fail, Node: n.Node, Detail: fmt.Sprintf("%s answers but not to `dibs doctor`: it runs an older dibs", n.Node),
				Fix: fmt.Sprintf("install the same dibs on %s as on the others and restart its agent", n.Node)})
		default:
			ps = append(ps, Check{Status: Fail, Node: n.Node, Detail: fmt.Sprintf("%s is a member but did not answer: %s", n.Node, words.OneLine(n.Error)),
				Fix: fmt.Sprintf("check that %s's gossip port is open both ways (TCP and UDP) and its agent is not stuck (`journalctl -u dibs` on %s)", n.Node, n.Node)})
		}
	}
	add("agents", ps, fmt.Sprintf("%d of %d agents answered (%s)", len(reached), len(nodes), names(reached)))

	// version: one dibs version and protocol everywhere.
	ps = nil
	versions := map[string][]string{}
	for _, n := range reached {
		v := fmt.Sprintf("%s (protocol %d)", n.Report.Version, n.Report.Protocol)
		versions[v] = append(versions[v], n.Node)
	}
	if len(versions) > 1 {
		var parts []string
		for _, v := range slices.Sorted(mapKeys(versions)) {
			parts = append(parts, fmt.Sprintf("%s on %s", v, strings.Join(versions[v], ", ")))
		}
		ps = append(ps, Check{Status: Warn, Detail: "agents run different dibs versions: " + strings.Join(parts, "; "),
			Fix: "install the same dibs on every node and restart the agents (an agent of another protocol cannot join at all)"})
	}
	okv := "no agent answered"
	for v := range versions {
		okv = "every agent runs dibs " + v
	}
	add("version", ps, okv)

	// clock: skew against the asking node.
	ps = nil
	worst := time.Duration(0)
	for _, n := range reached {
		a := n.Skew.Abs()
		worst = max(worst, a)
		if a < SkewWarn {
			continue
		}
		st := Warn
		if a >= SkewFail {
			st = Fail
		}
		dir := "ahead of"
		if n.Skew < 0 {
			dir = "behind"
		}
		ps = append(ps, Check{Status: st, Node: n.Node, Detail: fmt.Sprintf("%s's clock is %s %s this node's (round trip %s): lease ends, queue ages and the board's times disagree between nodes",
			n.Node, n.Skew.Abs().Round(time.Millisecond), dir, n.RTT.Round(time.Millisecond)),
			Fix: fmt.Sprintf("run NTP on every node: `sudo apt-get install chrony` (or enable systemd-timesyncd) on %s", n.Node)})
	}
	add("clock", ps, fmt.Sprintf("clocks agree within %s (warn at %s)", worst.Round(time.Millisecond), SkewWarn))

	// cluster: one name, one key, encrypted, nothing dropped.
	ps = nil
	cnames, keys := map[string][]string{}, map[string][]string{}
	alone := 0
	for _, n := range reached {
		c := n.Report.Cluster
		if c.Name == "" {
			alone++
			continue
		}
		cnames[c.Name] = append(cnames[c.Name], n.Node)
		keys[c.KeyID] = append(keys[c.KeyID], n.Node)
		if !c.Encrypted {
			ps = append(ps, Check{Status: Warn, Node: n.Node, Detail: fmt.Sprintf("%s gossips without encryption (--insecure): anyone who reaches its port can claim GPUs as anyone", n.Node),
				Fix: "make a key with `dibs keygen /etc/dibs/cluster.key`, copy it to every node, set [cluster] key_file and drop insecure"})
		}
		if c.DecryptFailures > 0 {
			ps = append(ps, Check{Status: Warn, Node: n.Node, Detail: fmt.Sprintf("%s dropped %d gossip messages it could not decrypt: something on the network gossips with another key or cluster name", n.Node, c.DecryptFailures),
				Fix: "copy the same /etc/dibs/cluster.key (and [cluster] name) to every node, or find the stray agent in the others' logs"})
		}
	}
	if len(cnames) > 1 || len(keys) > 1 {
		ps = append(ps, Check{Status: Fail, Detail: fmt.Sprintf("agents answered with %d cluster names and %d keys", len(cnames), len(keys)),
			Fix: "give every node the same [cluster] name and key file"})
	}
	okc := "runs alone (no cluster)"
	for name := range cnames {
		okc = fmt.Sprintf("cluster %q, one key, encrypted on every node", name)
	}
	if alone > 0 && len(cnames) > 0 {
		ps = append(ps, Check{Status: Warn, Detail: fmt.Sprintf("%d agents run alone while the others form a cluster", alone), Fix: "give every agent the same [cluster] settings"})
	}
	add("cluster", ps, okc)

	// ports: what must be open, and addresses the others can reach.
	ps = nil
	var loop, routable, ssh, nossh []string
	for _, n := range reached {
		if a := n.Report.Cluster.GossipAddr; a != "" {
			if isLoopback(hostOf(a)) {
				loop = append(loop, n.Node)
			} else {
				routable = append(routable, n.Node)
			}
		}
		if n.Report.SSHAddr != "" {
			ssh = append(ssh, n.Node+" "+n.Report.SSHAddr)
		} else {
			nossh = append(nossh, n.Node)
		}
	}
	if len(loop) > 0 && len(routable) > 0 {
		ps = append(ps, Check{Status: Fail, Detail: fmt.Sprintf("%s advertise a loopback gossip address while %s do not: the others cannot reach them", strings.Join(loop, ", "), strings.Join(routable, ", ")),
			Fix: "set [cluster] advertise (or --advertise) to an address the other nodes reach"})
	}
	if len(ssh) > 0 && len(nossh) > 0 {
		ps = append(ps, Check{Status: Warn, Detail: fmt.Sprintf("the SSH board is on for %s but off on %s", strings.Join(ssh, ", "), strings.Join(nossh, ", ")),
			Fix: "set [ssh] listen on every node, or on none, so `ssh -p PORT` works on any"})
	}
	var open []string
	for _, n := range reached {
		if a := n.Report.Cluster.GossipAddr; a != "" {
			open = append(open, n.Node+" gossip "+a+" (tcp+udp)")
		}
		if n.Report.SSHAddr != "" {
			open = append(open, n.Node+" ssh "+n.Report.SSHAddr)
		}
	}
	okp := "no ports: the agents serve only their unix sockets"
	if len(open) > 0 {
		okp = "open between nodes: " + strings.Join(open, "; ")
	}
	add("ports", ps, okp)

	// tmux on every node.
	ps = nil
	for _, n := range reached {
		if n.Report.TmuxError != "" || n.Report.Tmux == "" {
			ps = append(ps, Check{Status: Fail, Node: n.Node, Detail: fmt.Sprintf("%s has no tmux: %s", n.Node, orText(n.Report.TmuxError, "not found")),
				Fix: fmt.Sprintf("`sudo apt-get install tmux` on %s: dibs run, queued runs and gangs start their sessions with it", n.Node)})
		}
	}
	add("tmux", ps, fmt.Sprintf("tmux found on %s", names(reached)))

	// probe backend.
	ps = nil
	var backs, sims []string
	simWhy := ""
	for _, n := range reached {
		b := n.Report.Backend
		backs = append(backs, n.Node+" "+b)
		if n.Report.NoLocalCPUs && b != "sim" {
			// The simulator says so of itself below, cores and all.
			ps = append(ps, Check{Status: Warn, Node: n.Node, Detail: fmt.Sprintf("%s's GPUs report no local CPUs (via %s): its sessions run on any core, and --cpus-per-gpu is refused there", n.Node, b),
				Fix: fmt.Sprintf("nothing on a machine of one NUMA node; else check that %s's firmware reports NUMA (numactl -H) and, for nvidia-smi, that the agent sees /sys/bus/pci/devices/*/local_cpulist", n.Node)})
		}
		switch b {
		case "nvml":
		case "nvidia-smi":
			ps = append(ps, Check{Status: Warn, Node: n.Node, Detail: fmt.Sprintf("%s reads its GPUs with nvidia-smi: %s", n.Node, orText(n.Report.BackendWhy, "NVML could not be loaded")),
				Fix: fmt.Sprintf("install the driver's NVML (libnvidia-ml.so.1) on %s and use a dibsd built with NVML (the amd64 package's, or go build -tags nvml with cgo); nvidia-smi is slower and has no topology", n.Node)})
		case "sim":
			sims = append(sims, n.Node)
			simWhy = orText(n.Report.BackendWhy, "--sim")
		default:
			ps = append(ps, Check{Status: Fail, Node: n.Node, Detail: fmt.Sprintf("%s reports no GPU backend", n.Node), Fix: "run `dibs probe` on it to see what fails"})
		}
	}
	if len(sims) > 0 {
		ps = append(ps, Check{Status: Warn, Detail: fmt.Sprintf("the GPUs of %s are simulated (%s): nothing they show is real hardware", strings.Join(sims, ", "), simWhy),
			Fix: "fine for a demo or a test; on a GPU node drop --sim (and sim in the config) from the agent"})
	}
	add("probe", ps, "every node reads its GPUs with NVML: "+strings.Join(backs, ", "))

	// disk for the store.
	ps = nil
	var disks []string
	for _, n := range reached {
		r := n.Report
		if r.DiskError != "" {
			ps = append(ps, Check{Status: Warn, Node: n.Node, Detail: fmt.Sprintf("cannot tell the free space of %s on %s: %s", r.DataDir, n.Node, r.DiskError), Fix: "check that the data dir exists and is the agent's"})
			continue
		}
		if r.DiskTotal == 0 {
			continue
		}
		share := float64(r.DiskFree) / float64(r.DiskTotal)
		disks = append(disks, fmt.Sprintf("%s %s free", n.Node, bytesStr(r.DiskFree)))
		st := ""
		switch {
		case r.DiskFree < DiskFailBytes:
			st = Fail
		case r.DiskFree < DiskWarnBytes || share < DiskWarnShare:
			st = Warn
		}
		if st != "" {
			ps = append(ps, Check{Status: st, Node: n.Node, Detail: fmt.Sprintf("%s has %s free (%.1f%%) for its lease store in %s: a full disk refuses every claim", n.Node, bytesStr(r.DiskFree), 100*share, r.DataDir),
				Fix: fmt.Sprintf("free space on the file system of %s on %s", r.DataDir, n.Node)})
		}
	}
	add("disk", ps, "room for the lease store: "+strings.Join(disks, ", "))

	// leases overdue or squatted for long.
	ps = nil
	overdue, squatted := 0, 0
	for _, n := range reached {
		for _, l := range n.Report.Overdue {
			overdue++
			late := l.For
			if late < OverdueWarn {
				continue
			}
			ps = append(ps, Check{Status: Warn, Node: n.Node, Detail: fmt.Sprintf("lease %s of %s (GPUs %s) is %s past its end", l.Lease, l.User, ints(l.GPUs), words.FormatDuration(late.Round(time.Minute))),
				Fix: fmt.Sprintf("ask %s to release it or `dibs extend %s`; an admin can `dibs release %s`; [leases] end_action = \"signal\" ends such leases", l.User, l.Lease, l.Lease)})
		}
		for _, q := range n.Report.Squatted {
			squatted++
			long := " (since when is not known: it was not sampled yet)"
			if q.For > 0 {
				long = " for " + words.FormatDuration(q.For.Round(time.Minute))
				if q.For < SquatLongAfter {
					continue
				}
			}
			on := "with no lease"
			if q.Holder != "" {
				on = "leased to " + q.Holder
			}
			ps = append(ps, Check{Status: Warn, Node: n.Node, Detail: fmt.Sprintf("GPU %d on %s (%s) has been squatted%s by %s (pid %s)", q.GPU, n.Node, on, long, strings.Join(q.Users, ", "), ints(q.PIDs)),
				Fix: fmt.Sprintf("`dibs adopt %s` (as its owner) takes it into a lease; or ask %s to stop it", firstOr(q.PIDs), strings.Join(q.Users, ", "))})
		}
	}
	add("leases", ps, fmt.Sprintf("no lease more than %s overdue (%d overdue), no GPU squatted for %s (%d squatted now)", words.FormatDuration(OverdueWarn), overdue, words.FormatDuration(SquatLongAfter), squatted))

	// sessions and leases that lost each other.
	ps = nil
	for _, n := range reached {
		for _, s := range n.Report.StraySessions {
			ps = append(ps, Check{Status: Warn, Node: n.Node, Detail: fmt.Sprintf("%s's tmux session %s on %s runs without a lease: its GPUs look free to everyone", s.User, s.Session, n.Node),
				Fix: fmt.Sprintf("%s: end it (`tmux kill-session -t %s`) or claim its GPUs (`dibs adopt PID`)", s.User, s.Session)})
		}
		for _, l := range n.Report.Sessionless {
			ps = append(ps, Check{Status: Warn, Node: n.Node, Detail: fmt.Sprintf("lease %s of %s on %s lost its session %s", l.Lease, l.User, n.Node, l.Session),
				Fix: fmt.Sprintf("`dibs release %s` (its agent ends it too once it notices)", l.Lease)})
		}
	}
	add("sessions", ps, "every dibs session has its lease and every lease with a session has it")
	return out
}

func mapKeys[V any](m map[string]V) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// hostOf is the host part of HOST:PORT or [IPv6]:PORT.
func hostOf(addr string) string {
	if ap, err := netip.ParseAddrPort(addr); err == nil {
		return ap.Addr().String()
	}
	if i := strings.LastIndexByte(addr, ':'); i >= 0 {
		return strings.Trim(addr[:i], "[]")
	}
	return addr
}

func isLoopback(h string) bool {
	ip, err := netip.ParseAddr(h)
	return h == "localhost" || err == nil && ip.IsLoopback()
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func ints(xs []int) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = fmt.Sprint(x)
	}
	return strings.Join(s, ",")
}

func firstOr(xs []int) string {
	if len(xs) == 0 {
		return "PID"
	}
	return fmt.Sprint(xs[0])
}

func bytesStr(n uint64) string {
	switch {
	case n >= 1<<40:
		return fmt.Sprintf("%.1f TiB", float64(n)/(1<<40))
	case n >= 1<<30:
		return fmt.Sprintf("%.1f GiB", float64(n)/(1<<30))
	default:
		return fmt.Sprintf("%d MiB", n>>20)
	}
}
