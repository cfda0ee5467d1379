package core

import (
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// TestProxyPortFollowsTheService: a service's replicas, and its move from
// a lost node (whose lease is still in the view, or gone from it with the
// port asked for), keep its proxy port; another service gets the lowest
// free one; the proxy off gives none.
func TestProxyPortFollowsTheService(t *testing.T) {
	r := service.PortRange{First: 30000, Last: 30003}
	s := &Service{cfg: Config{ProxyPorts: r}}
	svc := func(id, user, name string, proxyPort int) lease.Lease {
		node, _ := lease.NodeOfID(id)
		return lease.Lease{ID: id, Node: node, User: user, Kind: lease.KindService,
			Service: &service.Service{Spec: service.Spec{Name: name, Port: 8000, ProxyPort: proxyPort}}}
	}
	v := queue.ClusterView{Nodes: []queue.NodeView{
		{Name: "node01", Leases: []lease.Lease{svc("node01-1", "alice", "llm", 30002)}},
		{Name: "node02", Leases: []lease.Lease{svc("node02-1", "bob", "llm", 30001)}},
	}}
	for _, c := range []struct {
		what, user, name string
		hint, want       int
	}{
		{"a replica (or a move) of alice's llm", "alice", "llm", 0, 30002},
		{"a replica of bob's llm asking for another port", "bob", "llm", 30003, 30001},
		{"a new service", "carol", "web", 0, 30003},
		{"a move whose old lease left the view, its port free", "carol", "web", 30003, 30003},
		{"a hint of a port another service holds", "carol", "web", 30001, 30003},
		{"a hint outside the range", "carol", "web", 22, 30003},
		{"a hint of the backend port", "carol", "web", 30000, 30003},
	} {
		got, err := s.proxyPort(v, &service.Spec{Name: c.name, Port: 9000, ProxyPort: c.hint}, c.user)
		if err != nil || got != c.want {
			t.Errorf("%s: %d, %v; want %d", c.what, got, err, c.want)
		}
	}
	v.Nodes[1].Leases = append(v.Nodes[1].Leases, svc("node02-2", "carol", "web", 30003))
	_, err := s.proxyPort(v, &service.Spec{Name: "tb", Port: 6006}, "dave")
	if err == nil || !strings.Contains(err.Error(), "every port of the services proxy (services.proxy_ports 30000-30003) is taken") {
		t.Errorf("a full range: %v", err)
	}
	if got, err := s.proxyPort(v, &service.Spec{Name: "tb"}, "dave"); got != 0 || err != nil {
		t.Errorf("a service without a port: %d, %v; want none", got, err)
	}
	off := &Service{}
	if got, err := off.proxyPort(v, &service.Spec{Name: "llm", Port: 8000, ProxyPort: 30002}, "alice"); got != 0 || err != nil {
		t.Errorf("the proxy off: %d, %v; want none", got, err)
	}
}
