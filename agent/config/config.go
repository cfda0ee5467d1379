// Package config reads the agent's TOML config file: every key optional,
// every error pointing at the file, the line and the reason.
package config

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/dibs-gpu/dibs/agent/events"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// DefaultConfigFile is where the agent looks for its config when none is named.
const DefaultConfigFile = "/etc/dibs/dibs.toml"

// KeysDoc is where a config error sends the reader for the keys: the
// installed guide's table and example (what a node has; the source tree's
// docs/ is not there).
const KeysDoc = "/usr/share/doc/dibs/operations.md, \"The config file\"; each with its default: /usr/share/doc/dibs/examples/dibs.toml"

// FileConfig is the TOML config file. Every key is optional; flags override it.
// Durations are strings like "30m" or "4h" or "7d".
type FileConfig struct {
	NodeName      string        `toml:"node_name"`
	DataDir       string        `toml:"data_dir"`
	Socket        string        `toml:"socket"`
	ProbeInterval string        `toml:"probe_interval"`
	Backend       string        `toml:"backend"`
	Sim           string        `toml:"sim"`
	SimLoad       string        `toml:"sim_load"`
	Leases        LeaseSection  `toml:"leases"`
	Cluster       ClusterConfig `toml:"cluster"`
	Queue         QueueSection  `toml:"queue"`
	SSH           SSHConfig     `toml:"ssh"`
	Metrics       MetricsConfig `toml:"metrics"`
	Events        EventsSection `toml:"events"`
	// Services is [services]: the services proxy.
	Services ServicesSection `toml:"services"`
	// Tags are the node's pools: tags = ["h100", "nvlink"].
	Tags []string `toml:"tags"`
	// Pools are the limits of pools, by tag: [pools.h100].
	Pools map[string]PoolSection `toml:"pools"`
}

// PoolSection is [pools.NAME]: what the nodes tagged NAME allow.
type PoolSection struct {
	// MaxTime caps time limits on the pool's nodes ("8h").
	MaxTime string `toml:"max_time"`
	// Users may use the pool's nodes; empty means everyone.
	Users []string `toml:"users"`
	// MaxGPUs is how many GPUs one person may hold in the pool at once.
	MaxGPUs int `toml:"max_gpus"`
}

// PoolLimits reads [pools.*].
func (fc FileConfig) PoolLimits() (lease.Pools, error) {
	if len(fc.Pools) == 0 {
		return nil, nil
	}
	out := lease.Pools{}
	for name, ps := range fc.Pools {
		key := "pools." + name
		if err := lease.CheckTags([]string{name}); err != nil {
			return nil, &ConfigError{Msg: key + ": " + err.Error()}
		}
		var pl lease.PoolLimits
		if ps.MaxTime != "" {
			d, err := words.ParseDuration(ps.MaxTime)
			if err != nil {
				return nil, &ConfigError{Msg: key + ".max_time: " + err.Error()}
			}
			pl.MaxTime = d
		}
		if ps.MaxGPUs < 0 {
			return nil, &ConfigError{Msg: fmt.Sprintf("%s.max_gpus: %d is negative", key, ps.MaxGPUs)}
		}
		pl.MaxGPUs = ps.MaxGPUs
		for _, u := range ps.Users {
			if !words.ValidUserName(u) {
				return nil, &ConfigError{Msg: fmt.Sprintf("%s.users: %q is not a user name", key, u)}
			}
		}
		pl.Users = ps.Users
		out[name] = pl
	}
	return out, nil
}

// EventsSection is [events]: how long the node keeps what happened on it.
type EventsSection struct {
	Keep string `toml:"keep"`
	// WebhookAllow, when set, lists the only destinations webhooks may
	// reach: host names (".example.com" for a domain) and address
	// prefixes; cloud metadata addresses stay refused.
	WebhookAllow []string `toml:"webhook_allow"`
	// LedgerKeep is how long ended leases are kept one by one (default
	// 90 days, the least: doctor's longest window); older ones are folded
	// into a row per person and day.
	LedgerKeep string `toml:"ledger_keep"`
	// PerUserHour caps the events one person's own actions add per hour
	// (default 720); zero keeps the default.
	PerUserHour int `toml:"per_user_hour"`
	// LedgerPerUserDay caps the ended leases of one person kept one by one
	// per day (default 2000); past it they fold into one row a day.
	LedgerPerUserDay int `toml:"ledger_per_user_day"`
}

// LedgerKeepFor reads ledger_keep (default lease.DefaultLedgerKeep).
func (e EventsSection) LedgerKeepFor() (time.Duration, error) {
	if e.LedgerKeep == "" {
		return lease.DefaultLedgerKeep, nil
	}
	d, err := words.ParseDuration(e.LedgerKeep)
	if err != nil {
		return 0, &ConfigError{Msg: "events.ledger_keep: " + err.Error()}
	}
	if d < lease.DefaultLedgerKeep {
		return 0, &ConfigError{Msg: fmt.Sprintf("events.ledger_keep: %s is less than %s, how far back dibs doctor looks: keep at least that", e.LedgerKeep, words.FormatDuration(lease.DefaultLedgerKeep))}
	}
	return d, nil
}

// Allowlist reads webhook_allow.
func (e EventsSection) Allowlist() (events.Allowlist, error) {
	a, err := events.ParseAllow(e.WebhookAllow)
	if err != nil {
		return a, &ConfigError{Msg: "events." + err.Error()}
	}
	return a, nil
}

// KeepFor reads keep (default 14 days).
func (e EventsSection) KeepFor() (time.Duration, error) {
	if e.Keep == "" {
		return event.DefaultEventKeep, nil
	}
	d, err := words.ParseDuration(e.Keep)
	if err != nil {
		return 0, &ConfigError{Msg: "events.keep: " + err.Error()}
	}
	if d < time.Hour {
		return 0, &ConfigError{Msg: fmt.Sprintf("events.keep: %s is less than an hour: keep events at least that long", e.Keep)}
	}
	return d, nil
}

// LeaseSection is [leases]: the node's time limits and end policy.
type LeaseSection struct {
	DefaultInteractive string `toml:"default_interactive"`
	DefaultBatch       string `toml:"default_batch"`
	MaxInteractive     string `toml:"max_interactive"`
	MaxBatch           string `toml:"max_batch"`
	WarnBefore         string `toml:"warn_before"`
	EndAction          string `toml:"end_action"`
	SignalGrace        string `toml:"signal_grace"`
	IdleAfter          string `toml:"idle_after"`
	IdleUtilPct        *int   `toml:"idle_util_pct"`
	AdminGroup         string `toml:"admin_group"`
	// BindCPUs false starts sessions unbound; unset or true binds each
	// to the cores local to its GPUs.
	BindCPUs *bool `toml:"bind_cpus"`
	// BookAhead is how far ahead a booking may start ("30d");
	// BookMaxGPUHours how many GPU-hours one person may hold booked (0:
	// no limit); BookMaxLength the longest one booking may last;
	// BookMaxCount how many bookings one person may hold on this node.
	BookAhead       string   `toml:"book_ahead"`
	BookMaxGPUHours *float64 `toml:"book_max_gpu_hours"`
	BookMaxLength   string   `toml:"book_max_length"`
	BookMaxCount    int      `toml:"book_max_count"`
	// ServiceGPUsPerUser bounds one person's services' GPUs (-1: no
	// services); ServiceGPUs all services' GPUs (0: a quarter of the
	// cluster's); ServicePools the pools services may run in.
	ServiceGPUsPerUser int      `toml:"service_gpus_per_user"`
	ServiceGPUs        int      `toml:"service_gpus"`
	ServicePools       []string `toml:"service_pools"`
	// ServiceIdleAfter is how long without requests nor SM use flags a
	// service idle ("24h"; "0": never).
	ServiceIdleAfter string `toml:"service_idle_after"`
}

// QueueSection is [queue]: fair-share, quotas, preemption.
type QueueSection struct {
	HalfLife         string             `toml:"half_life"`
	Shares           map[string]float64 `toml:"shares"`
	Quotas           map[string]int     `toml:"quotas"`
	GroupQuotas      map[string]int     `toml:"group_quotas"`
	UserGroups       map[string]string  `toml:"user_groups"`
	IdleReclaimAfter string             `toml:"idle_reclaim_after"`
	ReservationTTL   string             `toml:"reservation_ttl"`
	LostAfter        string             `toml:"lost_after"`
	// RequeueBackoff and MaxRequeueBackoff space a requeued run's retries
	// (first pause, and the most one may grow to).
	RequeueBackoff    string `toml:"requeue_backoff"`
	MaxRequeueBackoff string `toml:"max_requeue_backoff"`
	PreemptSignal     string `toml:"preempt_signal"`
	PreemptGrace      string `toml:"preempt_grace"`
	// MaxQueuedPerUser is how many requests one person may have queued
	// or running at one node (default 64).
	MaxQueuedPerUser int `toml:"max_queued_per_user"`
}

// Sched applies [queue] over the defaults.
func (q QueueSection) Sched() (queue.SchedConfig, error) {
	c := queue.SchedConfig{Shares: q.Shares, Quotas: q.Quotas, GroupQuotas: q.GroupQuotas, UserGroups: q.UserGroups}
	for _, d := range []struct {
		key string
		v   string
		dst *time.Duration
	}{
		{"queue.half_life", q.HalfLife, &c.HalfLife},
		{"queue.idle_reclaim_after", q.IdleReclaimAfter, &c.IdleReclaimAfter},
		{"queue.reservation_ttl", q.ReservationTTL, &c.ReservationTTL},
		{"queue.lost_after", q.LostAfter, &c.LostAfter},
		{"queue.requeue_backoff", q.RequeueBackoff, &c.RequeueBackoff},
		{"queue.max_requeue_backoff", q.MaxRequeueBackoff, &c.MaxRequeueBackoff},
	} {
		if d.v == "" {
			continue
		}
		v, err := words.ParseDuration(d.v)
		if err != nil {
			return c, &ConfigError{Msg: d.key + ": " + err.Error()}
		}
		*d.dst = v
	}
	if c.RequeueBackoff > 0 && c.MaxRequeueBackoff > 0 && c.MaxRequeueBackoff < c.RequeueBackoff {
		return c, &ConfigError{Msg: fmt.Sprintf("queue.max_requeue_backoff %s is shorter than queue.requeue_backoff %s: make it at least as long", q.MaxRequeueBackoff, q.RequeueBackoff)}
	}
	for u, s := range q.Shares {
		if s <= 0 {
			return c, &ConfigError{Msg: fmt.Sprintf("queue.shares: %s's share %g must be positive", u, s)}
		}
	}
	for u, n := range q.Quotas {
		if n < 0 {
			return c, &ConfigError{Msg: fmt.Sprintf("queue.quotas: %s's quota %d is negative", u, n)}
		}
	}
	if q.MaxQueuedPerUser < 0 {
		return c, &ConfigError{Msg: fmt.Sprintf("queue.max_queued_per_user: %d is negative", q.MaxQueuedPerUser)}
	}
	c.MaxQueuedPerUser = q.MaxQueuedPerUser
	return c.WithDefaults(), nil
}

// PreemptSig reads preempt_signal (default SIGUSR1).
func (q QueueSection) PreemptSig() (syscall.Signal, error) {
	switch strings.ToUpper(strings.TrimPrefix(strings.ToUpper(q.PreemptSignal), "SIG")) {
	case "", "USR1":
		return syscall.SIGUSR1, nil
	case "USR2":
		return syscall.SIGUSR2, nil
	case "TERM":
		return syscall.SIGTERM, nil
	case "INT":
		return syscall.SIGINT, nil
	case "HUP":
		return syscall.SIGHUP, nil
	}
	return 0, &ConfigError{Msg: fmt.Sprintf("queue.preempt_signal: %q is not one of SIGUSR1, SIGUSR2, SIGTERM, SIGINT, SIGHUP", q.PreemptSignal)}
}

// ClusterConfig is [cluster]: how this agent finds and trusts the others.
type ClusterConfig struct {
	Bind      string   `toml:"bind"`
	Advertise string   `toml:"advertise"`
	Join      []string `toml:"join"`
	Name      string   `toml:"name"`
	KeyFile   string   `toml:"key_file"`
	Insecure  bool     `toml:"insecure"`
	// MaxStreams and MaxStreamsPerSource cap the TCP streams other hosts
	// hold open to the gossip port (gossip.Config's MaxInboundStreams
	// and MaxInboundStreamsPerSource); zero keeps the defaults.
	MaxStreams          int `toml:"max_streams"`
	MaxStreamsPerSource int `toml:"max_streams_per_source"`
}

// SSHConfig is [ssh]: the SSH front door serving the board.
type SSHConfig struct {
	Listen    string `toml:"listen"`
	UsersFile string `toml:"users_file"`
	// The front door's limits (see agent/sshd.Settings); zero keeps the
	// defaults.
	IdleTimeout     string `toml:"idle_timeout"`
	SessionDeadline string `toml:"session_deadline"`
	MaxSessions     int    `toml:"max_sessions"`
	MaxPerUser      int    `toml:"max_per_user"`
	MaxPerSource    int    `toml:"max_per_source"`
	MaxPreAuth      int    `toml:"max_pre_auth"`
}

// Durations reads the front door's time limits.
func (s SSHConfig) Durations() (idle, deadline time.Duration, err error) {
	for _, d := range []struct {
		key string
		v   string
		dst *time.Duration
	}{{"ssh.idle_timeout", s.IdleTimeout, &idle}, {"ssh.session_deadline", s.SessionDeadline, &deadline}} {
		if d.v == "" {
			continue
		}
		if *d.dst, err = words.ParseDuration(d.v); err != nil {
			return 0, 0, &ConfigError{Msg: d.key + ": " + err.Error()}
		}
	}
	for _, n := range []struct {
		key string
		v   int
	}{{"ssh.max_sessions", s.MaxSessions}, {"ssh.max_per_user", s.MaxPerUser}, {"ssh.max_per_source", s.MaxPerSource}, {"ssh.max_pre_auth", s.MaxPreAuth}} {
		if n.v < 0 {
			return 0, 0, &ConfigError{Msg: fmt.Sprintf("%s: %d must not be negative", n.key, n.v)}
		}
	}
	return idle, deadline, nil
}

// MetricsConfig is [metrics]: Prometheus metrics over HTTP.
type MetricsConfig struct {
	// Listen is HOST:PORT to serve /metrics on; empty (the default) serves
	// none. The metrics name the people holding GPUs: bind to loopback or
	// an address only the monitoring host reaches.
	Listen string `toml:"listen"`
}

// ServicesSection is [services]: the agents' proxy for services (issue
// 33), off by default. Every node should have the same settings
// (docs/operations.md says what happens when they differ).
type ServicesSection struct {
	// Proxy turns the proxy on: one port per service, the same on every
	// node, forwarding to its healthy replicas.
	Proxy bool `toml:"proxy"`
	// ProxyPorts is the range FIRST-LAST (default DefaultProxyPorts): the
	// first port is each agent's backend, the others the services'.
	ProxyPorts string `toml:"proxy_ports"`
	// ProxyMaxConns bounds the connections one agent's proxy forwards at
	// once (default 1024), ProxyMaxPerService one service's (default 256).
	ProxyMaxConns      int `toml:"proxy_max_conns"`
	ProxyMaxPerService int `toml:"proxy_max_per_service"`
	// ProxyIdle closes a forwarded connection with no byte either way for
	// that long (default "10m").
	ProxyIdle string `toml:"proxy_idle"`
}

// DefaultProxyPorts is the proxy's range when [services] proxy is on and
// proxy_ports is not given: the backend and 99 services.
const DefaultProxyPorts = "30000-30099"

// ProxyRange is the proxy's range, zero when the proxy is off; a bad
// range is refused even then, so turning it on later holds no surprise.
func (ss ServicesSection) ProxyRange() (service.PortRange, error) {
	ports := ss.ProxyPorts
	if ports == "" {
		ports = DefaultProxyPorts
	}
	r, err := service.ParsePortRange(ports)
	if err != nil {
		return r, &ConfigError{Msg: "services.proxy_ports: " + err.Error()}
	}
	if !ss.Proxy {
		return service.PortRange{}, nil
	}
	return r, nil
}

// ProxyIdleFor is [services] proxy_idle (0: the proxy's default).
func (ss ServicesSection) ProxyIdleFor() (time.Duration, error) {
	if ss.ProxyIdle == "" {
		return 0, nil
	}
	d, err := words.ParseDuration(ss.ProxyIdle)
	if err != nil || d < time.Second {
		return 0, &ConfigError{Msg: fmt.Sprintf("services.proxy_idle: %q is not a duration of a second or more (e.g. 10m)", ss.ProxyIdle)}
	}
	return d, nil
}

// CheckListen reads a HOST:PORT the agent is to listen on; unlike the
// gossip addresses, the port must be given (no port is dibs's own).
func CheckListen(s string) error {
	_, port, err := net.SplitHostPort(s)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT (e.g. 127.0.0.1:9477, or :9477 for every address)", s)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 0 || n > 65535 {
		return fmt.Errorf("%q has a bad port", s)
	}
	return nil
}

// ConfigError points at the line of the config file that is wrong.
type ConfigError struct {
	File string
	Line int
	Msg  string
}

func (e *ConfigError) Error() string {
	if e.Line > 0 {
		return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Msg)
	}
	return fmt.Sprintf("%s: %s", e.File, e.Msg)
}

// LoadFile reads and checks a config file. Unknown keys and bad values are
// refused with the file, the line and the reason.
func LoadFile(path string) (FileConfig, error) {
	var fc FileConfig
	data, err := os.ReadFile(path)
	if err != nil {
		return fc, fmt.Errorf("read config: %w", err)
	}
	md, err := toml.Decode(string(data), &fc)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return fc, &ConfigError{File: path, Line: pe.Position.Line, Msg: pe.Message}
		}
		msg := err.Error()
		line := 0
		for _, k := range md.Keys() {
			if strings.Contains(msg, k.String()) || (len(k) > 0 && strings.Contains(msg, "'"+k[len(k)-1]+"'")) {
				line = findKeyLine(data, k)
			}
		}
		return fc, &ConfigError{File: path, Line: line, Msg: strings.TrimPrefix(msg, "toml: ")}
	}
	if und := md.Undecoded(); len(und) > 0 {
		k := und[0]
		return fc, &ConfigError{File: path, Line: findKeyLine(data, k), Msg: fmt.Sprintf("unknown key %q (the keys dibs reads: %s)", k.String(), KeysDoc)}
	}
	if err := fc.check(); err != nil {
		var ce *ConfigError
		if errors.As(err, &ce) {
			ce.File = path
			ce.Line = findKeyLine(data, strings.Split(ce.Msg[:strings.IndexByte(ce.Msg, ':')], "."))
			return fc, ce
		}
		return fc, &ConfigError{File: path, Msg: err.Error()}
	}
	return fc, nil
}

// findKeyLine finds the line where a dotted key is set, tracking [table]
// headers, so errors can point at it. 0 when not found.
func findKeyLine(data []byte, key toml.Key) int {
	if len(key) == 0 {
		return 0
	}
	table := strings.Join(key[:len(key)-1], ".")
	name := key[len(key)-1]
	cur := ""
	sc := bufio.NewScanner(bytes.NewReader(data))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]") {
			cur = strings.Trim(line, "[] ")
			if cur == strings.Join(key, ".") {
				return n
			}
			continue
		}
		if cur != table {
			continue
		}
		if k, _, ok := strings.Cut(line, "="); ok && strings.Trim(strings.TrimSpace(k), `"'`) == name {
			return n
		}
	}
	return 0
}

// check validates values; errors are ConfigErrors whose Msg starts with the
// dotted key followed by a colon, which LoadFile turns into a line number.
func (fc FileConfig) check() error {
	bad := func(key, format string, args ...any) error {
		return &ConfigError{Msg: key + ": " + fmt.Sprintf(format, args...)}
	}
	if fc.ProbeInterval != "" {
		d, err := time.ParseDuration(fc.ProbeInterval)
		if err != nil || d < 100*time.Millisecond || d > time.Minute {
			return bad("probe_interval", "%q is not a duration between 100ms and 1m", fc.ProbeInterval)
		}
	}
	switch fc.Backend {
	case "", "auto", "nvml", "nvidia-smi", "sim":
	default:
		return bad("backend", "%q is not one of auto, nvml, nvidia-smi, sim", fc.Backend)
	}
	if _, err := fc.Leases.Policy(lease.DefaultPolicy()); err != nil {
		return err
	}
	if _, err := fc.Queue.Sched(); err != nil {
		return err
	}
	if _, err := fc.Queue.PreemptSig(); err != nil {
		return err
	}
	if _, _, err := fc.SSH.Durations(); err != nil {
		return err
	}
	if fc.Queue.PreemptGrace != "" {
		if _, err := words.ParseDuration(fc.Queue.PreemptGrace); err != nil {
			return bad("queue.preempt_grace", "%v", err)
		}
	}
	if _, err := fc.Events.KeepFor(); err != nil {
		return err
	}
	if _, err := fc.Events.Allowlist(); err != nil {
		return err
	}
	if _, err := fc.Events.LedgerKeepFor(); err != nil {
		return err
	}
	if fc.Events.PerUserHour < 0 {
		return &ConfigError{Msg: fmt.Sprintf("events.per_user_hour: %d must not be negative", fc.Events.PerUserHour)}
	}
	if fc.Events.LedgerPerUserDay < 0 {
		return &ConfigError{Msg: fmt.Sprintf("events.ledger_per_user_day: %d must not be negative", fc.Events.LedgerPerUserDay)}
	}
	for _, a := range []struct{ key, v string }{{"cluster.bind", fc.Cluster.Bind}, {"cluster.advertise", fc.Cluster.Advertise}} {
		if a.v != "" {
			if _, _, err := SplitHostPort(a.v, 7946); err != nil {
				return bad(a.key, "%v", err)
			}
		}
	}
	for _, j := range fc.Cluster.Join {
		if _, _, err := SplitHostPort(j, 7946); err != nil {
			return bad("cluster.join", "%v", err)
		}
	}
	if fc.NodeName != "" {
		if err := words.ValidNodeName(fc.NodeName); err != nil {
			return bad("node_name", "%v", err)
		}
	}
	if fc.Metrics.Listen != "" {
		if err := CheckListen(fc.Metrics.Listen); err != nil {
			return bad("metrics.listen", "%v", err)
		}
	}
	if err := lease.CheckTags(fc.Tags); err != nil {
		return bad("tags", "%v", err)
	}
	if _, err := fc.Services.ProxyRange(); err != nil {
		return err
	}
	if _, err := fc.Services.ProxyIdleFor(); err != nil {
		return err
	}
	if fc.Services.ProxyMaxConns < 0 || fc.Services.ProxyMaxPerService < 0 {
		return bad("services.proxy_max_conns", "the proxy's bounds must not be negative (0: the defaults, 1024 and 256 per service)")
	}
	if _, err := fc.PoolLimits(); err != nil {
		return err
	}
	return nil
}

// Policy applies [leases] over base.
func (ls LeaseSection) Policy(base lease.Policy) (lease.Policy, error) {
	p := base
	durs := []struct {
		key string
		v   string
		dst *time.Duration
	}{
		{"leases.default_interactive", ls.DefaultInteractive, &p.DefaultInteractive},
		{"leases.default_batch", ls.DefaultBatch, &p.DefaultBatch},
		{"leases.max_interactive", ls.MaxInteractive, &p.MaxInteractive},
		{"leases.max_batch", ls.MaxBatch, &p.MaxBatch},
		{"leases.warn_before", ls.WarnBefore, &p.WarnBefore},
		{"leases.signal_grace", ls.SignalGrace, &p.SignalGrace},
		{"leases.idle_after", ls.IdleAfter, &p.IdleAfter},
		{"leases.book_ahead", ls.BookAhead, &p.BookAhead},
		{"leases.book_max_length", ls.BookMaxLength, &p.BookMaxLength},
		{"leases.service_idle_after", ls.ServiceIdleAfter, &p.ServiceIdleAfter},
	}
	for _, d := range durs {
		if d.v == "0" && d.dst == &p.ServiceIdleAfter {
			*d.dst = 0 // never flag a service idle
			continue
		}
		if d.v == "" {
			continue
		}
		v, err := words.ParseDuration(d.v)
		if err != nil {
			return p, &ConfigError{Msg: d.key + ": " + err.Error()}
		}
		*d.dst = v
	}
	if ls.EndAction != "" {
		p.EndAction = lease.EndAction(ls.EndAction)
	}
	if ls.IdleUtilPct != nil {
		p.IdleUtilPct = *ls.IdleUtilPct
	}
	if ls.AdminGroup != "" {
		p.AdminGroup = ls.AdminGroup
	}
	if ls.BookMaxGPUHours != nil {
		p.BookMaxGPUHours = *ls.BookMaxGPUHours
	}
	if ls.BookMaxCount != 0 {
		p.BookMaxCount = ls.BookMaxCount
	}
	if ls.ServiceGPUsPerUser != 0 {
		p.ServiceGPUsPerUser = ls.ServiceGPUsPerUser
	}
	if ls.ServiceGPUs != 0 {
		p.ServiceGPUs = ls.ServiceGPUs
	}
	if len(ls.ServicePools) > 0 {
		p.ServicePools = ls.ServicePools
	}
	if err := p.Validate(); err != nil {
		key := "leases." + strings.SplitN(err.Error(), " ", 2)[0]
		return p, &ConfigError{Msg: key + ": " + err.Error()}
	}
	return p, nil
}

// SplitHostPort reads HOST:PORT, HOST, or :PORT, filling the default port.
func SplitHostPort(s string, defPort int) (string, int, error) {
	host, portStr, err := net.SplitHostPort(s)
	if err != nil {
		if strings.Contains(err.Error(), "missing port") {
			return s, defPort, nil
		}
		return "", 0, fmt.Errorf("%q is not HOST:PORT", s)
	}
	port, err := strconv.Atoi(portStr)
	if err != nil || port < 0 || port > 65535 {
		return "", 0, fmt.Errorf("%q has a bad port", s)
	}
	return host, port, nil
}
