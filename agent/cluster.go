package agent

import (
	"context"
	"fmt"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
)

// clusterLink is what the agent needs from the cluster; single-node mode has
// none. Methods may be called from any goroutine.
type clusterLink interface {
	enabled() bool
	// publish tells the others our state changed; urgent for lease changes.
	publish(urgent bool)
	claim(ctx context.Context, c lease.Caller, req api.ClaimRequest) (api.ClaimResponse, error)
	release(ctx context.Context, c lease.Caller, node string, ids []string) (api.ReleaseResponse, error)
	extend(ctx context.Context, c lease.Caller, node string, req api.ExtendRequest) (api.ClaimResponse, error)
	// request sends op with body to node's agent and decodes the answer.
	request(ctx context.Context, c lease.Caller, node, op string, body, out any) error
	// view is every node the cluster knows, this one included.
	view() []remoteNode
	// sshHost is the address people ssh to for a node's sessions.
	sshHost(node string) string
	status(now time.Time) ([]api.Member, api.GossipCounter)
	shutdown(graceful bool)
	// addr is where this agent gossips.
	addr() string
}

// GossipAddr is the HOST:PORT this agent gossips on, empty when it runs alone.
// Other agents join it there.
func (a *Agent) GossipAddr() string { return a.cluster.addr() }

// noCluster is single-node mode.
type noCluster struct{}

func (noCluster) enabled() bool { return false }
func (noCluster) publish(bool)  {}
func (noCluster) claim(_ context.Context, _ lease.Caller, req api.ClaimRequest) (api.ClaimResponse, error) {
	return api.ClaimResponse{}, notInCluster(req.Node)
}
func (noCluster) release(_ context.Context, _ lease.Caller, node string, _ []string) (api.ReleaseResponse, error) {
	return api.ReleaseResponse{}, notInCluster(node)
}
func (noCluster) extend(_ context.Context, _ lease.Caller, node string, _ api.ExtendRequest) (api.ClaimResponse, error) {
	return api.ClaimResponse{}, notInCluster(node)
}
func (noCluster) request(_ context.Context, _ lease.Caller, node, _ string, _, _ any) error {
	return notInCluster(node)
}
func (noCluster) view() []remoteNode                                 { return nil }
func (noCluster) sshHost(node string) string                         { return node }
func (noCluster) status(time.Time) ([]api.Member, api.GossipCounter) { return nil, api.GossipCounter{} }
func (noCluster) shutdown(bool)                                      {}

func notInCluster(node string) error {
	return &lease.Error{Code: lease.CodeNotFound, Msg: fmt.Sprintf("no node %s: this agent runs alone (start it with --join to form a cluster)", node)}
}

// ClusterSettings configure gossip with the other agents.
type ClusterSettings struct {
	BindAddr      string
	BindPort      int
	AdvertiseAddr string
	AdvertisePort int
	// Join lists HOST:PORT peers to join (and re-join) .
	Join []string
	// Name is the cluster's label: agents of another cluster are ignored.
	Name string
	// Key is the 32-byte cluster key; nil only with Insecure.
	Key      []byte
	Insecure bool
	// Fast re-joins missing peers every second instead of every 15 s, and
	// sends changed telemetry every second instead of every 5 s: for agents
	// on one machine (tests, the demo), where bandwidth is free and a peer
	// restarts in milliseconds.
	Fast bool
}

func (noCluster) addr() string { return "" }
