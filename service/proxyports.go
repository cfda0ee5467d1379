package service

import (
	"fmt"
	"strconv"
	"strings"
)

// PortRange is the proxy's ports (agent config [services] proxy_ports):
// its first port is each agent's backend port, where the other agents'
// proxies reach this node's replicas; the rest are the services' own,
// one per service, the same on every node.
type PortRange struct {
	First, Last int
}

// ParsePortRange reads "30000-30099": at least two ports (the backend
// and one service), within 1 to 65535.
func ParsePortRange(s string) (PortRange, error) {
	lo, hi, ok := strings.Cut(strings.TrimSpace(s), "-")
	a, errA := strconv.Atoi(strings.TrimSpace(lo))
	b, errB := strconv.Atoi(strings.TrimSpace(hi))
	r := PortRange{First: a, Last: b}
	if !ok || errA != nil || errB != nil {
		return PortRange{}, fmt.Errorf("%q is not a range FIRST-LAST such as 30000-30099", s)
	}
	return r, r.Check()
}

// MaxProxyPorts bounds a range: each agent holds every port of it open
// while it runs (see agent/proxy), one socket each.
const MaxProxyPorts = 1024

// Check refuses a range no proxy can use, in one line.
func (r PortRange) Check() error {
	if r.First < 1 || r.Last > 65535 || r.Last <= r.First {
		return fmt.Errorf("%d-%d must be FIRST-LAST with 1 <= FIRST < LAST <= 65535 (the first port is the agents' backend, the rest the services')", r.First, r.Last)
	}
	if n := r.Last - r.First + 1; n > MaxProxyPorts {
		return fmt.Errorf("%d-%d is %d ports; give at most %d (each agent holds every port of the range open)", r.First, r.Last, n, MaxProxyPorts)
	}
	return nil
}

// IsZero reports an unset range: the proxy is off.
func (r PortRange) IsZero() bool { return r == PortRange{} }

// String is the range as the config writes it.
func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// Backend is the port each agent's backend listens on.
func (r PortRange) Backend() int { return r.First }

// Holds reports whether port is one of the services' ports of the range.
func (r PortRange) Holds(port int) bool { return port > r.First && port <= r.Last }

// Pick is the lowest service port of the range that used does not hold;
// false when every one is taken.
func (r PortRange) Pick(used map[int]bool) (int, bool) {
	for p := r.First + 1; p <= r.Last; p++ {
		if !used[p] {
			return p, true
		}
	}
	return 0, false
}
