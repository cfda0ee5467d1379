package gossip

import (
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"strconv"
	"time"

	"github.com/hashicorp/memberlist"
)

// DefaultPort is the port agents gossip on (UDP and TCP), memberlist's and
// serf's usual one.
const DefaultPort = 7946

// DefaultClusterName is the label used when Config.ClusterName is empty.
const DefaultClusterName = "dibs"

// Config configures a Cluster. The zero value of every tuning knob means its
// default; see the Default* constants for what the defaults are and why.
type Config struct {
	// NodeName names this node in the cluster; it must be unique. A host
	// name: letters, digits, '-', '.', '_'.
	NodeName string

	// BindAddr and BindPort are where memberlist listens (UDP and TCP).
	// BindAddr defaults to "0.0.0.0". BindPort 0 picks a free port (tests);
	// agents use DefaultPort.
	BindAddr string
	BindPort int
	// AdvertiseAddr and AdvertisePort are what the other agents dial; empty
	// and 0 mean memberlist's choice (the bound address, or a private IP
	// when bound to all interfaces) and the bound port.
	AdvertiseAddr string
	AdvertisePort int

	// Join lists peers as host:port (a bare host means DefaultPort). The
	// Cluster joins them in the background, with backoff while it has no
	// peer; once up it re-joins, every RejoinInterval, any of them that is
	// not an alive member, and does so again after every membership loss,
	// because memberlist stops contacting peers it has reaped as dead and a
	// healed partition would otherwise stay split.
	Join []string

	// ClusterName is memberlist's label: it is sent with every packet and
	// stream and authenticated with the key, and an agent ignores anything
	// labelled for another cluster. Empty means DefaultClusterName.
	ClusterName string

	// Key is the 32-byte cluster key (AES-256-GCM, see GenerateKey and
	// ReadKeyFile). It is required unless Insecure is set: the key is what
	// lets an agent trust the caller identity in another agent's request.
	Key []byte
	// Insecure runs without encryption, for demos on one machine. It is an
	// error to set both Key and Insecure.
	Insecure bool

	// BootID identifies this start of the agent; BootedAt orders starts of
	// the same node. Empty and zero mean a random id and the time New was
	// called. Whatever the Delegate's LocalState returns in these fields (and
	// in Node) is replaced by these.
	BootID   string
	BootedAt time.Time

	// Protocol is the newest version of the agents' own request protocol
	// this agent speaks (carried inside requests). It travels in the node
	// meta, so agents too far apart are refused at join with a message
	// that says so, instead of failing request by request.
	Protocol uint8
	// ProtocolMin is the oldest request protocol this agent still speaks
	// (the previous release's); zero means Protocol only. Meta carries the
	// range, so an agent one release older or newer joins (rolling
	// upgrades) and one further apart is refused.
	ProtocolMin uint8

	// Logf receives memberlist's warnings and errors and this package's own,
	// one line each. Nil discards them. Lines about packets from the wrong
	// cluster (bad key or label) are rate-limited; Stats counts them all.
	Logf func(format string, args ...any)

	// Failure detection (memberlist's SWIM). Zero means the defaults.
	ProbeInterval time.Duration
	ProbeTimeout  time.Duration
	SuspicionMult int
	// Gossip of lease changes. Zero means the defaults.
	GossipInterval time.Duration
	GossipNodes    int
	RetransmitMult int
	// PushPullInterval is how often an agent exchanges every node's full
	// state with one random member (anti-entropy); memberlist scales it up
	// above 32 nodes. Zero means DefaultPushPullInterval; negative disables
	// it (tests of the other paths).
	PushPullInterval time.Duration
	// TCPTimeout bounds dials and stream reads and writes (push/pull,
	// reliable sends). Zero means DefaultTCPTimeout.
	TCPTimeout time.Duration
	// PacketSize is the most memberlist puts in one UDP packet (its
	// UDPBufferSize). Zero means 1400, which fits a 1500-byte MTU with room
	// for tunnels.
	PacketSize int

	// TelemetryInterval is the least time between two telemetry sends of
	// this node; telemetry is sent only when it changed (Snapshot.TakenAt
	// aside) or TelemetryRefresh has passed. Zero means the defaults.
	TelemetryInterval time.Duration
	TelemetryRefresh  time.Duration
	// RejoinInterval is how often configured peers that are not alive
	// members are joined again. Zero means DefaultRejoinInterval.
	RejoinInterval time.Duration
	// RequestTimeout bounds a Request when its context has no earlier
	// deadline. Zero means DefaultRequestTimeout.
	RequestTimeout time.Duration
	// MaxConcurrentRequests bounds the requests from other agents handled
	// at once; more are dropped (the requester times out). Zero means
	// DefaultMaxConcurrentRequests.
	MaxConcurrentRequests int
	// MaxInboundStreams and MaxInboundStreamsPerSource cap the TCP streams
	// other hosts hold open to this agent at once, in total and from one
	// address. At a cap, the oldest stream under it that has not proven it
	// holds the key is closed to make room; a new stream is closed at
	// accept, before memberlist reads it, only when every slot holds a
	// proven one (see transport.go). A stream that sends nothing within
	// 2 s (or TCPTimeout, if shorter) is closed too. Without them, idle
	// connections from one host without the key took the agent to its file
	// limit. Zero means the defaults.
	MaxInboundStreams          int
	MaxInboundStreamsPerSource int

	// Faults, when set, decides the fate of everything this agent sends
	// (the nemesis tests); nil in production.
	Faults Faults

	// testPacketLoss drops this fraction of incoming UDP packets, to test
	// failure detection on a lossy network.
	testPacketLoss float64
}

// Defaults, chosen for a LAN of up to a few dozen nodes where a killed agent
// must show as dead within 5 s and a lease change must be everywhere within
// a fraction of a second.
//
// Failure detection. memberlist marks a node suspect after one failed probe
// (direct UDP ping, then IndirectChecks pings through others plus a TCP
// ping, all within ProbeInterval) and dead after the suspicion timeout,
// SuspicionMult × log10(N) × ProbeInterval, shortened towards that minimum
// as other members confirm the suspicion. memberlist's LAN defaults (1 s,
// ×4) give 6 s of suspicion at 32 nodes plus ~2 s to the first failed
// probe: about 9 s. Halving the probe interval and using ×3 gives, at 32
// nodes: first probe of the dead node within ~0.5 s (31 members each probe
// it once per 31 intervals, at random phase), suspect ~0.5 s later,
// suspicion 3 × 1.5 × 0.5 s = 2.3 s, the dead message a few 100 ms gossip
// rounds later: ~3.5 s in all, under 5 s with margin. At 128 nodes the
// suspicion is 3.2 s. The cost is two pings a second per agent (~0.4 KB/s
// in and out). A false "dead" needs the direct ping, all three indirect
// pings and the TCP fallback ping to fail, and then no refutation to arrive
// within the suspicion timeout, which many gossip rounds carry; at 5 %
// packet loss that does not happen (see the loss test). ProbeTimeout 200 ms
// is far above a LAN's round trip and leaves the rest of the interval for
// the indirect and TCP pings.
//
// Gossip. Lease changes do not rely on gossip (Publish sends them to every
// member directly); gossip is the safety net for a lost packet, so its
// interval is short (100 ms: an empty round sends nothing) and the
// retransmit count modest (3 × log10(N+1) per agent, with every agent that
// learns a change gossiping it on).
//
// Push/pull carries every node's full state (compressed: ~1 KB per node
// with 8 GPUs) with one random member; 30 s keeps the idle traffic of a
// 32-node cluster under 2 KB/s per agent while repairing anything missed
// within a minute or so.
const (
	DefaultProbeInterval         = 500 * time.Millisecond
	DefaultProbeTimeout          = 200 * time.Millisecond
	DefaultSuspicionMult         = 3
	DefaultGossipInterval        = 100 * time.Millisecond
	DefaultGossipNodes           = 3
	DefaultRetransmitMult        = 3
	DefaultPushPullInterval      = 30 * time.Second
	DefaultTCPTimeout            = 5 * time.Second
	DefaultPacketSize            = 1400
	DefaultTelemetryInterval     = 5 * time.Second
	DefaultTelemetryRefresh      = 60 * time.Second
	DefaultRejoinInterval        = 15 * time.Second
	DefaultRequestTimeout        = 3 * time.Second
	DefaultMaxConcurrentRequests = 64
	// A peer's streams are short (a push/pull, one reliable message each,
	// closed once read), so a few dozen at once from one address is far
	// above what a healthy cluster uses, even with every agent of a test
	// cluster on one loopback address.
	DefaultMaxInboundStreams          = 512
	DefaultMaxInboundStreamsPerSource = 64
)

// withDefaults validates c and fills in its defaults.
func (c Config) withDefaults() (Config, error) {
	if !validNodeName(c.NodeName) {
		return c, fmt.Errorf("node name %q: use 1 to %d letters, digits, '-', '.' or '_' (a host name)", c.NodeName, maxNodeName)
	}
	switch {
	case c.Insecure && len(c.Key) > 0:
		return c, errors.New("both a cluster key and insecure mode are set: drop one")
	case !c.Insecure && len(c.Key) == 0:
		return c, errors.New("no cluster key: generate one with `dibs keygen` and give every agent the same key (or run insecure, for a demo on one machine)")
	case !c.Insecure && len(c.Key) != KeySize:
		return c, fmt.Errorf("cluster key is %d bytes, want %d (AES-256): generate one with `dibs keygen`", len(c.Key), KeySize)
	}
	if c.ClusterName == "" {
		c.ClusterName = DefaultClusterName
	}
	if !validToken(c.ClusterName, 64) {
		return c, fmt.Errorf("cluster name %q: use up to 64 printable characters without spaces", c.ClusterName)
	}
	if c.BootID != "" && !validToken(c.BootID, maxBootID) {
		return c, fmt.Errorf("boot id %q: use up to %d printable characters without spaces", c.BootID, maxBootID)
	}
	if c.BindAddr == "" {
		c.BindAddr = "0.0.0.0"
	}
	if c.BindPort < 0 || c.BindPort > 65535 || c.AdvertisePort < 0 || c.AdvertisePort > 65535 {
		return c, fmt.Errorf("gossip port out of range: bind %d, advertise %d", c.BindPort, c.AdvertisePort)
	}
	if c.Logf == nil {
		c.Logf = func(string, ...any) {}
	}
	setDur := func(d *time.Duration, def time.Duration) {
		if *d == 0 {
			*d = def
		}
	}
	setInt := func(i *int, def int) {
		if *i <= 0 {
			*i = def
		}
	}
	setDur(&c.ProbeInterval, DefaultProbeInterval)
	setDur(&c.ProbeTimeout, DefaultProbeTimeout)
	setInt(&c.SuspicionMult, DefaultSuspicionMult)
	setDur(&c.GossipInterval, DefaultGossipInterval)
	setInt(&c.GossipNodes, DefaultGossipNodes)
	setInt(&c.RetransmitMult, DefaultRetransmitMult)
	setDur(&c.PushPullInterval, DefaultPushPullInterval)
	if c.PushPullInterval < 0 {
		c.PushPullInterval = 0
	}
	setDur(&c.TCPTimeout, DefaultTCPTimeout)
	setInt(&c.PacketSize, DefaultPacketSize)
	setDur(&c.TelemetryInterval, DefaultTelemetryInterval)
	setDur(&c.TelemetryRefresh, DefaultTelemetryRefresh)
	setDur(&c.RejoinInterval, DefaultRejoinInterval)
	setDur(&c.RequestTimeout, DefaultRequestTimeout)
	setInt(&c.MaxConcurrentRequests, DefaultMaxConcurrentRequests)
	setInt(&c.MaxInboundStreams, DefaultMaxInboundStreams)
	setInt(&c.MaxInboundStreamsPerSource, DefaultMaxInboundStreamsPerSource)
	if c.ProbeTimeout >= c.ProbeInterval {
		return c, fmt.Errorf("probe timeout %v must be shorter than the probe interval %v", c.ProbeTimeout, c.ProbeInterval)
	}
	if c.PacketSize < 576 || c.PacketSize > 65000 {
		return c, fmt.Errorf("packet size %d: use 576 to 65000 bytes", c.PacketSize)
	}
	for _, p := range c.Join {
		if _, err := normalizePeer(p); err != nil {
			return c, err
		}
	}
	return c, nil
}

// normalizePeer turns a configured peer into host:port.
func normalizePeer(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty join address")
	}
	host, port, err := net.SplitHostPort(p)
	if err != nil {
		// A bare host (or IPv6 literal without brackets) gets the default port.
		if ip := net.ParseIP(p); ip != nil || !containsColon(p) {
			return net.JoinHostPort(p, strconv.Itoa(DefaultPort)), nil
		}
		return "", fmt.Errorf("join address %q: want host:port", p)
	}
	if n, err := strconv.Atoi(port); err != nil || n <= 0 || n > 65535 {
		return "", fmt.Errorf("join address %q: bad port", p)
	}
	if host == "" {
		return "", fmt.Errorf("join address %q: no host", p)
	}
	return p, nil
}

func containsColon(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] == ':' {
			return true
		}
	}
	return false
}

// memberlistConfig builds memberlist's configuration around the settings
// chosen above. The delegates, transport and logger are filled in by New.
func (c *Config) memberlistConfig(logOut io.Writer) *memberlist.Config {
	mc := memberlist.DefaultLANConfig()
	mc.Name = c.NodeName
	mc.Label = c.ClusterName
	mc.BindAddr = c.BindAddr
	mc.BindPort = c.BindPort
	mc.AdvertiseAddr = c.AdvertiseAddr
	mc.AdvertisePort = c.AdvertisePort
	mc.ProbeInterval = c.ProbeInterval
	mc.ProbeTimeout = c.ProbeTimeout
	mc.SuspicionMult = c.SuspicionMult
	mc.GossipInterval = c.GossipInterval
	mc.GossipNodes = c.GossipNodes
	mc.PushPullInterval = c.PushPullInterval
	mc.TCPTimeout = c.TCPTimeout
	// memberlist's own messages (alive, suspect, dead) are retransmitted
	// RetransmitMult × ceil(log10(N+1)) times by every agent that learns
	// them, so an agent misses one with odds of about e^-(that number).
	// At 32 agents memberlist's default (4, so 8 copies each) left one
	// agent in a few mass starts not knowing another until the next
	// push/pull (~e^-8 for each of ~1000 pairs); 6 makes it e^-12. Membership
	// messages are few, so the extra copies cost little.
	mc.RetransmitMult = 6
	mc.UDPBufferSize = c.PacketSize
	// Dead nodes stay gossiped to for as long as memberlist's LAN default,
	// then are reaped; the re-join loop covers configured peers after that.
	mc.GossipToTheDeadTime = 30 * time.Second
	// A node that died may come back at another address (a new port in
	// tests, a new DHCP lease) once it has been dead a while.
	mc.DeadNodeReclaimTime = 10 * time.Second
	// Our bodies are already deflated; memberlist's LZW over them only
	// costs CPU (and it always compresses streams, even when that grows them).
	mc.EnableCompression = false
	if !c.Insecure {
		mc.GossipVerifyIncoming = true
		mc.GossipVerifyOutgoing = true
	}
	mc.Logger = log.New(logOut, "", 0)
	return mc
}
