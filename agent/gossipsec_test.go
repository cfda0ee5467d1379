package agent_test

import (
	"fmt"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
)

// The fourth round of attacks (issue 31) on the agents' gossip: what a
// host without the key, or a node holding it, could do to the others.

// holdStreams holds n idle TCP connections to target from each of the
// loopback addresses 127.0.0.1 … 127.0.0.<hosts> (the first is the
// agents' own, as a user on a member node would connect), re-dialling each
// one the agent closes, until the test ends. It returns once every
// connection has been dialled once.
func holdStreams(t *testing.T, target string, hosts, n int) {
	t.Helper()
	stop := make(chan struct{})
	var wg sync.WaitGroup
	t.Cleanup(func() { close(stop); wg.Wait() })
	var dialed sync.WaitGroup
	for h := 1; h <= hosts; h++ {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(fmt.Sprintf("127.0.0.%d", h))}, Timeout: time.Second}
		for range n {
			dialed.Add(1)
			wg.Go(func() {
				for first := true; ; first = false {
					c, err := d.Dial("tcp", target)
					if first {
						dialed.Done()
					}
					if err == nil {
						go func() { <-stop; c.Close() }()
						_, _ = io.Copy(io.Discard, c) // until the agent closes it
						c.Close()
					}
					select {
					case <-stop:
						return
					case <-time.After(10 * time.Millisecond): // re-dial at once, less the test's own CPU
					}
				}
			})
		}
	}
	dialed.Wait()
}

// TestClaimAcrossNodesWhileStrangersHoldTheGossipPort (issue 31, broken
// 4): a host without the key holds 64 idle connections from each of 8
// addresses to node01's gossip port — the 512 the agent allows — and
// re-dials each one closed. A claim of node01's GPU made on node02 still
// succeeds, as does its release: node01 hears its peer however many
// strangers connect.
func TestClaimAcrossNodesWhileStrangersHoldTheGossipPort(t *testing.T) {
	nodes := agenttest.Cluster(t, agenttest.ClusterOptions{Specs: []string{"2xL40S", "2xL40S"}, Quiet: true})
	holdStreams(t, nodes[0].Agent.GossipAddr(), 8, 64)
	for i := range 3 {
		r, err := nodes[1].Client.Claim(ctx(t), api.ClaimRequest{Node: "node01", Count: 1, Note: "through the flood"})
		if err != nil {
			t.Fatalf("claim %d of node01's GPU made on node02 while strangers hold 512 connections to node01: %v", i+1, err)
		}
		if r.Node != "node01" {
			t.Fatalf("claim %d landed on %s, want node01", i+1, r.Node)
		}
		if _, err := nodes[1].Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{r.ID}}); err != nil {
			t.Fatalf("release %s made on node02 while strangers hold 512 connections to node01: %v", r.ID, err)
		}
	}
}
