package agent_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/store/storetest"
)

// TestDiskFailuresRefuseClearlyAndLoseNothing: while the disk fails its
// fsyncs or is full, claims and releases are refused with a message that
// says what happened and what to do, nothing half-done shows on the board,
// and once the disk is back everything acknowledged survives a crash.
func TestDiskFailuresRefuseClearlyAndLoseNothing(t *testing.T) {
	t.Parallel()
	disk := storetest.New(storetest.Options{})
	n := agenttest.Start(t, agenttest.Options{Sim: "4xH100-80GB", Store: disk, Quiet: true})
	kept, err := n.Client.Claim(ctx(t), api.ClaimRequest{GPUs: []int{0}, Duration: "1h"})
	if err != nil {
		t.Fatal(err)
	}
	held := func() map[string]bool {
		b, err := n.Client.Board(ctx(t))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]bool{}
		for _, g := range b.Nodes[0].GPUs {
			if g.Lease != nil {
				out[g.Lease.ID] = true
			}
		}
		return out
	}
	for _, tt := range []struct {
		fault storetest.Fault
		says  string
	}{
		{storetest.SyncError, "the agent's disk failed to save it, so nothing changed; try again"},
		{storetest.DiskFull, "is full, so dibs cannot record new leases: free some space"},
	} {
		disk.SetFault(tt.fault)
		_, err := n.Client.Claim(ctx(t), api.ClaimRequest{GPUs: []int{1}, Duration: "1h"})
		var ae *api.Error
		if !errors.As(err, &ae) || ae.Code != string(refusal.CodeUnavailable) || !strings.Contains(ae.Msg, tt.says) || strings.Contains(ae.Msg, "\n") {
			t.Errorf("%s: claim answered %v, want one line, unavailable, saying %q", tt.fault, err, tt.says)
		}
		_, err = n.Client.Release(ctx(t), api.ReleaseRequest{IDs: []string{kept.ID}})
		if !errors.As(err, &ae) || ae.Code != string(refusal.CodeUnavailable) || !strings.Contains(ae.Msg, tt.says) {
			t.Errorf("%s: release answered %v, want unavailable, saying %q", tt.fault, err, tt.says)
		}
		if h := held(); len(h) != 1 || !h[kept.ID] {
			t.Errorf("%s: the board shows %v, want only %s (nothing half-done)", tt.fault, h, kept.ID)
		}
	}
	disk.SetFault(storetest.NoFault)
	second, err := n.Client.Claim(ctx(t), api.ClaimRequest{GPUs: []int{1}, Duration: "1h"})
	if err != nil {
		t.Fatalf("claim once the disk is back: %v", err)
	}
	// A crash keeps exactly what was acknowledged.
	durable := disk.Crash()
	n.Crash()
	n.Opts.Store = durable
	n.Restart()
	if h := held(); len(h) != 2 || !h[kept.ID] || !h[second.ID] {
		t.Errorf("after a crash the board shows %v, want %s and %s", h, kept.ID, second.ID)
	}
}
