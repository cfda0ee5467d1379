package agent_test

import (
	"context"
	"testing"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
)

// tryStart starts an agent with o and returns Start's error (stopping it if
// it did start).
func tryStart(t *testing.T, o agenttest.Options) error {
	t.Helper()
	probe, err := sim.New(sim.Options{Spec: "4xH100-80GB", HostName: o.Name})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{NodeName: o.Name, DataDir: o.DataDir, Socket: o.DataDir + ".other.sock", Log: agenttest.Logger(t, o.Name, false)}, agent.Deps{Probe: probe})
	if err != nil {
		return err
	}
	if err := a.Start(context.Background()); err != nil {
		return err
	}
	a.Stop()
	return nil
}

// tryStartCluster starts a clustered agent with o and returns Start's error.
func tryStartCluster(t *testing.T, o agenttest.Options) error {
	t.Helper()
	probe, err := sim.New(sim.Options{Spec: "2xL40S", HostName: o.Name})
	if err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{NodeName: o.Name, DataDir: o.DataDir, Cluster: o.Cluster, Log: agenttest.Logger(t, o.Name, false)}, agent.Deps{Probe: probe})
	if err != nil {
		return err
	}
	if err := a.Start(context.Background()); err != nil {
		return err
	}
	a.Stop()
	return nil
}
