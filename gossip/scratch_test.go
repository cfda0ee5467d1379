package gossip

import (
	"bytes"
	"compress/flate"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

func TestScratchSizes(t *testing.T) {
	s, err := nodeprobe.NewSim(nodeprobe.SimOptions{Spec: "8xH100-80GB", HostName: "node-with-a-long-name-01"})
	if err != nil { t.Fatal(err) }
	l := nodeprobe.Load{GPUs: map[int]nodeprobe.GPULoad{}}
	for i := 0; i < 8; i++ {
		l.GPUs[i] = nodeprobe.GPULoad{UtilizationPct: 90, Processes: []nodeprobe.LoadProcess{{PID: 1000 + i, User: "root", Command: "python train.py --config configs/big.yaml", UsedMemoryMiB: 30000}}}
	}
	s.SetLoad(l)
	snap, _ := s.Snapshot(context.Background())
	b, _ := json.Marshal(snap)
	var leases []lease.Lease
	for i := 0; i < 8; i++ {
		leases = append(leases, lease.Lease{ID: lease.LeaseID("node-with-a-long-name-01", uint64(1000+i)), Node: "node-with-a-long-name-01", GPUs: []int{i}, User: strings.Repeat("u", 32), UID: 100000 + i, Token: uint64(1000 + i), Kind: lease.KindInteractive, Note: randNote(i), StartedAt: time.Now(), ExpiresAt: time.Now().Add(4 * time.Hour), Session: "dibs-node-1000"})
	}
	lb, _ := json.Marshal(leases)
	comp := func(b []byte) int {
		for _, lv := range []int{flate.BestSpeed, flate.DefaultCompression} { var buf bytes.Buffer; w, _ := flate.NewWriter(&buf, lv); w.Write(b); w.Close(); t.Logf("level %d: %d", lv, buf.Len()) }
		var buf bytes.Buffer
		w, _ := flate.NewWriter(&buf, flate.BestCompression)
		w.Write(b); w.Close()
		return buf.Len()
	}
	t.Logf("snapshot json %d flate %d", len(b), comp(b))
	t.Logf("leases json %d flate %d", len(lb), comp(lb))
}

func randNote(i int) string {
	const a = "abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
	b := make([]byte, 200)
	x := uint32(i*7919 + 1)
	for j := range b { x = x*1664525 + 1013904223; b[j] = a[(x>>24)%uint32(len(a))] }
	return string(b)
}
