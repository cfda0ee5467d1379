// Package service holds the rules of a service (`dibs serve`): a named,
// long-lived run that holds its GPUs while it is up, is health-checked,
// and is restarted in place with a growing backoff when it dies, until it
// crash-loops. No I/O: the agent's supervisor (agent/node) probes the
// process and its port and asks a Tracker what to do; time is passed in.
package service

import (
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dibs-gpu/dibs/base/termsafe"
)

// Spec is a service's definition beyond its command (which the lease's
// job holds): its name, the port it answers on and how it is checked. It
// travels on the service's lease to every node, so it is small and
// bounded (Check).
type Spec struct {
	// Name is unique among its owner's services across the cluster.
	Name string `json:"name"`
	// Port is the TCP port the service listens on; 0 checks only that its
	// command runs.
	Port int `json:"port,omitempty"`
	// Health is an HTTP path whose 2xx answer means healthy; empty checks
	// by TCP connect alone.
	Health string `json:"health,omitempty"`
	// HealthCmd is a shell command whose exit 0 means healthy, run as
	// the owner in the service's directory (`--health-cmd`); with Port,
	// the port's listener must be the service's own as well. Everyone
	// sees it, as they see the name and port.
	HealthCmd string `json:"health_cmd,omitempty"`
	// Preemptible lets quota preemption take the service's GPUs, as it
	// takes a borrowed run's; without it a service is never preempted.
	Preemptible bool `json:"preemptible,omitempty"`
	// Replica is this replica's index (0-based) among the service's
	// Replicas: each replica is its own lease, with its own GPUs,
	// supervisor and moves, so the index is what tells them apart.
	Replica int `json:"replica,omitempty"`
	// Replicas is how many replicas the service was started with
	// (`--replicas K`); 0 means one, so a single replica reads as before.
	Replicas int `json:"replicas,omitempty"`
	// Replaces is, while a rolling update (`dibs serve --update`) starts
	// this replica beside the old one, the old one's lease: admission lets
	// the two share a name and index only then, and only when that lease
	// is the caller's own live replica of the service.
	Replaces string `json:"replaces,omitempty"`
	// ProxyPort is the service's port on every node's proxy (agent config
	// [services] proxy): one address that follows it through restarts and
	// moves. The admitting node assigns it (never the client); the
	// service's replicas share it; 0 when the proxy is off.
	ProxyPort int `json:"proxy_port,omitempty"`
	// Root is, on a replica a move placed (agent/svcmove.go), the lease
	// the replica was first started as: every copy of one replica shares
	// it, so a stop of any copy (a stop's record names the root) ends the
	// others when their nodes return, and keeps a lost one from being
	// moved again. Empty on a replica that was never moved: its own lease
	// is the root.
	Root string `json:"root,omitempty"`
	// Place is where the service's owner asked it to run, beyond what its
	// lease holds (GPUs, MIG instance, memory budget, --cpus any): a move
	// or an update places the replica again under the same asks. The
	// admitting node fills it from the claim (never the client).
	Place *Placement `json:"place,omitempty"`
}

// Placement is the part of a service's claim that says where it may run
// and that its lease does not keep: small and bounded (Check), as it
// travels on the lease to every node.
type Placement struct {
	// Tags are the pools the claim asked for (--pool), with the one the
	// policy adds for services (leases.service_pools).
	Tags []string `json:"tags,omitempty"`
	// Model is --model: only GPUs whose model contains it.
	Model string `json:"model,omitempty"`
	// CPUsPerGPU is --cpus-per-gpu: that many of each GPU's local cores.
	CPUsPerGPU int `json:"cpus_per_gpu,omitempty"`
	// MIG is the MIG profile the claim asked for (--mig 3g.40gb); empty
	// when it named an instance (a MIG- UUID or GPU:INDEX, which a move
	// cannot take elsewhere: it reads the profile from the lost node's
	// last snapshot instead).
	MIG string `json:"mig,omitempty"`
	// Nodelist and Exclude are --nodelist and --exclude: the nodes it may
	// ever run on, and those it must not, so a move keeps to them. --node
	// only says where it starts: a replica pinned to a lost node could
	// never move.
	Nodelist []string `json:"nodelist,omitempty"`
	Exclude  []string `json:"exclude,omitempty"`
}

// IsZero reports whether p asks for nothing, so a lease need not carry it.
func (p *Placement) IsZero() bool {
	return p == nil || len(p.Tags) == 0 && p.Model == "" && p.CPUsPerGPU == 0 && p.MIG == "" && len(p.Nodelist) == 0 && len(p.Exclude) == 0
}

// Bounds of a Placement, those of a claim's (lease.CheckTags,
// words.MaxModelLen, lease.MaxCPUsPerGPU, lease.MaxNodeList), kept here as
// the service room imports neither.
const (
	maxNodeList   = 64
	maxPlaceTags  = 32
	maxTagLen     = 63
	maxModelLen   = 64
	maxCPUsPerGPU = 1024
	maxMIGLen     = 128
)

// Check refuses a placement no claim could have asked for.
func (p *Placement) Check() error {
	if p == nil {
		return nil
	}
	if len(p.Tags) > maxPlaceTags {
		return fmt.Errorf("a service's placement names %d pools; at most %d", len(p.Tags), maxPlaceTags)
	}
	for _, t := range p.Tags {
		if !validTag(t) {
			return fmt.Errorf("pool %q must be 1 to %d letters, digits, '-', '_' or '.'", termsafe.String(t), maxTagLen)
		}
	}
	if len(p.Model) > maxModelLen || strings.ContainsAny(p.Model, "\r\n") || termsafe.Check(p.Model) != nil {
		return fmt.Errorf("--model must be one line of at most %d characters", maxModelLen)
	}
	if len(p.MIG) > maxMIGLen || strings.ContainsAny(p.MIG, " \r\n\t") || termsafe.Check(p.MIG) != nil {
		return fmt.Errorf("--mig must be a MIG profile such as 3g.40gb (at most %d characters)", maxMIGLen)
	}
	for _, l := range []struct {
		flag  string
		names []string
	}{{"--nodelist", p.Nodelist}, {"--exclude", p.Exclude}} {
		if len(l.names) > maxNodeList {
			return fmt.Errorf("a service's %s names %d nodes; at most %d", l.flag, len(l.names), maxNodeList)
		}
		for _, n := range l.names {
			if !validTag(n) {
				return fmt.Errorf("a service's %s names %q: a node name is 1 to %d letters, digits, '-', '_' or '.'", l.flag, termsafe.String(n), maxTagLen)
			}
		}
	}
	if p.CPUsPerGPU < 0 || p.CPUsPerGPU > maxCPUsPerGPU {
		return fmt.Errorf("--cpus-per-gpu %d is out of range: 1 to %d", p.CPUsPerGPU, maxCPUsPerGPU)
	}
	return nil
}

// validTag is a node tag's rule (words.ValidNodeName).
func validTag(t string) bool {
	if t == "" || len(t) > maxTagLen || t[0] == '-' || t[0] == '.' {
		return false
	}
	for _, r := range t {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}

// Status is what the supervisor last saw of a service's replica: written
// to the lease on every change of state, so every node's board shows it.
type Status struct {
	State State `json:"state,omitempty"`
	// Restarts counts restarts in place since the service started.
	Restarts int `json:"restarts,omitempty"`
	// Since is when the replica now running was started.
	Since time.Time `json:"since,omitzero"`
	// PID is the session's first process of the replica now running, so
	// the owner (and tests) can tell a restart from the same process.
	PID int `json:"pid,omitempty"`
	// IdleSince, while set, flags the replica idle: no request to its
	// port and no SM use on its GPUs since then, for longer than the
	// cluster's service_idle_after. A service is never reclaimed for it;
	// its owner is told once, and the board shows it.
	IdleSince time.Time `json:"idle_since,omitzero"`
}

// Service is a service as its lease carries it: definition and status.
type Service struct {
	Spec
	Status
}

// State is where a replica stands, as `dibs services` prints it.
type State string

// The states of a replica.
const (
	Starting        State = "starting"
	Healthy         State = "healthy"
	Unhealthy       State = "unhealthy"
	Restarting      State = "restarting"
	CrashLoop       State = "crash-looping"
	Moving          State = "moving"
	Stopped         State = "stopped"
	maxNameLen            = 40
	maxHealthLen          = 200
	maxHealthCmdLen       = 500
	maxReplacesLen        = 100
)

// MaxReplicas bounds `--replicas`: every replica is a lease whose
// definition every node holds, and a small team's endpoint needs a few.
const MaxReplicas = 8

// MaxDefBytes bounds a service's command, directory and environment as
// they travel on its lease to every node (lease.Lease.Published keeps a
// service's job whole): with MaxPerUser services a person adds at most
// 16 KiB to every node's state.
const MaxDefBytes = 4 << 10

// MaxPerUser is how many services one person may run across the cluster,
// so the definitions every node holds stay bounded per user.
const MaxPerUser = 4

// Check refuses a definition no node should run, with words for the
// person who typed it.
func (s *Spec) Check() error {
	if s == nil {
		return nil
	}
	if err := CheckName(s.Name); err != nil {
		return err
	}
	if s.Replicas < 0 || s.Replicas > MaxReplicas {
		return fmt.Errorf("--replicas %d is out of range: give 1 to %d", s.Replicas, MaxReplicas)
	}
	if s.Replica < 0 || s.Replica >= max(s.Replicas, 1) {
		return fmt.Errorf("replica %d of service %s does not exist: it has %d (0 to %d)", s.Replica, s.Name, max(s.Replicas, 1), max(s.Replicas, 1)-1)
	}
	if len(s.Replaces) > maxReplacesLen || termsafe.Check(s.Replaces) != nil || strings.ContainsAny(s.Replaces, " \r\n\t") {
		return fmt.Errorf("the lease a new replica replaces must be a lease id such as node01-42")
	}
	if len(s.Root) > maxReplacesLen || termsafe.Check(s.Root) != nil || strings.ContainsAny(s.Root, " \r\n\t") {
		return fmt.Errorf("a moved replica's root must be a lease id such as node01-42")
	}
	if s.Port < 0 || s.Port > 65535 {
		return fmt.Errorf("port %d is out of range: give 1 to 65535", s.Port)
	}
	if s.ProxyPort < 0 || s.ProxyPort > 65535 {
		return fmt.Errorf("proxy port %d is out of range: give 1 to 65535", s.ProxyPort)
	}
	if err := s.Place.Check(); err != nil {
		return err
	}
	if s.HealthCmd != "" {
		if s.Health != "" {
			return fmt.Errorf("give --health PATH or --health-cmd CMD, not both")
		}
		if len(s.HealthCmd) > maxHealthCmdLen || strings.ContainsAny(s.HealthCmd, "\r\n") {
			return fmt.Errorf("--health-cmd must be one line of at most %d characters", maxHealthCmdLen)
		}
		if err := termsafe.Check(s.HealthCmd); err != nil {
			return fmt.Errorf("--health-cmd holds %w", err)
		}
	}
	if s.Health != "" {
		if s.Port == 0 {
			return fmt.Errorf("--health %s needs --port: the check asks the service's port", s.Health)
		}
		if len(s.Health) > maxHealthLen || !strings.HasPrefix(s.Health, "/") || strings.ContainsAny(s.Health, " \r\n\t") {
			return fmt.Errorf("--health must be an HTTP path such as /health (at most %d characters, no spaces)", maxHealthLen)
		}
		if err := termsafe.Check(s.Health); err != nil {
			return fmt.Errorf("--health holds %w", err)
		}
	}
	return nil
}

// CheckName refuses a service name that would not read well as a tmux
// session name or a lease's label: 1 to 40 letters, digits, '-' and '_',
// starting with a letter.
func CheckName(name string) error {
	ok := name != "" && len(name) <= maxNameLen && utf8.ValidString(name)
	for i, r := range name {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z':
		case i > 0 && (r >= '0' && r <= '9' || r == '-' || r == '_'):
		default:
			ok = false
		}
	}
	if !ok {
		return fmt.Errorf("service name %q must be 1 to %d letters, digits, '-' or '_', starting with a letter", termsafe.String(name), maxNameLen)
	}
	return nil
}

// SessionName is the tmux session a service's replica runs in: svc-NAME,
// so `tmux ls` tells services from runs (dibs-NODE-N) at a glance.
func SessionName(name string) string { return "svc-" + name }

// ReplicaSession is the tmux session of replica i of service name:
// svc-NAME for replica 0 (as a single replica's), svcI-NAME for replica
// I (svc1-llm). Every service's session starts svc-, so llm's replica 1
// never takes the session of a service named llm-1 (svc-llm-1), and a
// session name may hold nothing but letters, digits, '-' and '_'.
func ReplicaSession(name string, replica int) string {
	if replica == 0 {
		return SessionName(name)
	}
	return "svc" + strconv.Itoa(replica) + "-" + name
}

// UpdateSession is the session of a replica started beside the one it
// replaces (a rolling update) when both are on one node: the old keeps
// its session until it is stopped, so the new one takes the other of two
// names, a 'u' added before the first '-' (svcu-llm, svc1u-llm) or taken
// away again at the next update.
func UpdateSession(session string) string {
	pre, rest, _ := strings.Cut(session, "-")
	if p, ok := strings.CutSuffix(pre, "u"); ok {
		return p + "-" + rest
	}
	return pre + "u-" + rest
}

// Label is how a replica is named to people and picked on the command
// line: NAME for a service of one replica, NAME/i for each of several
// (`dibs logs llm/1`).
func (s *Spec) Label() string {
	if s.Replicas <= 1 && s.Replica == 0 {
		return s.Name
	}
	return s.Name + "/" + strconv.Itoa(s.Replica)
}

// ParseRef splits what a person typed to pick a service's replica: NAME
// (replica 0, or all of them where a command acts on the service) or
// NAME/i. pick reports whether an index was given.
func ParseRef(ref string) (name string, replica int, pick bool, err error) {
	name, idx, pick := strings.Cut(ref, "/")
	if err := CheckName(name); err != nil {
		return "", 0, false, err
	}
	if !pick {
		return name, 0, false, nil
	}
	replica, err = strconv.Atoi(idx)
	if err != nil || replica < 0 || replica >= MaxReplicas || idx != strconv.Itoa(replica) {
		return "", 0, false, fmt.Errorf("%q: pick a replica as NAME/i, i from 0 to %d", termsafe.String(ref), MaxReplicas-1)
	}
	return name, replica, true, nil
}

// URL is where a replica on node answers (empty without a port).
func URL(node string, port int) string {
	if port == 0 {
		return ""
	}
	return fmt.Sprintf("http://%s:%d", node, port)
}
