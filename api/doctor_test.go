package api

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// A pool's limits reach `dibs export slurm` through the doctor report's
// config (they were dropped, so pools never became partitions).
func TestDoctorConfigCarriesPools(t *testing.T) {
	p := lease.DefaultPolicy()
	p.Pools = lease.Pools{"l40s": {MaxGPUs: 1, MaxTime: 2 * time.Hour}, "a100": {Users: []string{"alice", "bob"}}}
	b, err := json.Marshal(ConfigOf(p, queue.SchedConfig{}))
	if err != nil {
		t.Fatal(err)
	}
	var c DoctorConfig
	if err := json.Unmarshal(b, &c); err != nil {
		t.Fatal(err)
	}
	got := c.Policy().Pools
	if got["l40s"].MaxGPUs != 1 || got["l40s"].MaxTime != 2*time.Hour || len(got["a100"].Users) != 2 {
		t.Errorf("pools after the round trip: %+v; want l40s's max_gpus and max_time and a100's users", got)
	}
}
