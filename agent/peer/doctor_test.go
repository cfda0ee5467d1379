package peer

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/outgrow/doctor"
)

var t0 = time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)

func goodHistory() HistoryReply {
	return HistoryReply{
		Entries: []lease.LedgerEntry{{LeaseID: "node01-7", Node: "node01", User: "ana", GPUs: []int{0, 1}, Start: t0, End: t0.Add(time.Hour),
			GPUSeconds: 7200, Reason: "released", Kind: lease.KindBatch, Limit: 2 * time.Hour, Entry: "node01-q3#0", Gang: "node01-q3-0", Rank: 1, QueuedAt: t0.Add(-time.Minute)}},
		Buckets: []doctor.Bucket{{Hour: t0, Seconds: 3600, BusySec: 3600, IdleSec: 3600, FreeSec: 7200, WaitingSec: 60, WaitingIdleSec: 30, WaitingIdleGPUSec: 30}},
		More:    true,
	}
}

func goodHealth() HealthReply {
	return HealthReply{Report: doctor.Report{Node: "node01", Version: "v1.0.0", Protocol: Version, Wall: t0, Backend: "nvml", Tmux: "/usr/bin/tmux",
		Cluster:  doctor.ClusterFacts{Name: "lab", Encrypted: true, KeyID: "0a1b2c3d", GossipAddr: "10.0.0.1:7946"},
		Squatted: []doctor.SquatFact{{GPU: 3, Users: []string{"bo"}, PIDs: []int{42}, For: time.Hour}},
		Overdue:  []doctor.LeaseFact{{Lease: "node01-7", User: "ana", GPUs: []int{0}, For: 2 * time.Hour}}}}
}

// TestDoctorMessagesRoundTrip: what one agent sends, the other decodes
// strictly and accepts.
func TestDoctorMessagesRoundTrip(t *testing.T) {
	for name, m := range map[string]Message{"history": goodHistory(), "health": goodHealth(), "history request": HistoryRequest{Part: HistoryLedger, Since: t0, AfterEnd: t0, AfterID: "node01-7"}} {
		b, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		var err2 error
		switch m.(type) {
		case HistoryReply:
			var x HistoryReply
			if err2 = decode(b, &x, true); err2 == nil {
				err2 = x.Validate()
			}
		case HealthReply:
			var x HealthReply
			if err2 = decode(b, &x, true); err2 == nil {
				err2 = x.Validate()
			}
		case HistoryRequest:
			var x HistoryRequest
			if err2 = decode(b, &x, true); err2 == nil {
				err2 = x.Validate()
			}
		}
		if err2 != nil {
			t.Errorf("%s: %v\n%s", name, err2, b)
		}
	}
}

// TestDoctorMessagesRefuse: a reply no correct agent sends is refused,
// naming what is wrong.
func TestDoctorMessagesRefuse(t *testing.T) {
	tests := []struct {
		name string
		m    Message
		want string
	}{
		{"entry of another node", func() Message { h := goodHistory(); h.Entries[0].Node = "node02"; return h }(), "does not belong to node"},
		{"negative GPU-seconds", func() Message { h := goodHistory(); h.Entries[0].GPUSeconds = -1; return h }(), "GPU-seconds out of range"},
		{"infinite GPU-seconds", func() Message { h := goodHistory(); h.Entries[0].GPUSeconds = math.Inf(1); return h }(), "GPU-seconds out of range"},
		{"control character in a reason", func() Message { h := goodHistory(); h.Entries[0].Reason = "exit\x1b[31m"; return h }(), "bad field"},
		{"bucket off the hour", func() Message { h := goodHistory(); h.Buckets[0].Hour = t0.Add(time.Minute); return h }(), "not a whole hour"},
		{"bucket over an hour", func() Message { h := goodHistory(); h.Buckets[0].Seconds = 9000; return h }(), "holds 9000 seconds"},
		{"too many items", HistoryReply{Buckets: make([]doctor.Bucket, MaxHistoryItems+1)}, "history items"},
		{"bidi in a version", func() Message { h := goodHealth(); h.Report.Version = "v1\u202e"; return h }(), "report of node01"},
		{"unknown part", HistoryRequest{Part: "secrets"}, "unknown history part"},
		{"bad cursor", HistoryRequest{Part: HistoryLedger, AfterID: "../x"}, "is not a lease id"},
		{"run without its lease", HistoryRequest{Part: HistoryRun}, "names its lease id"},
		{"kept run without a holder", HistoryReply{Run: &job.Job{Command: []string{"python", "train.py"}}}, "without its command or holder"},
		{"kept run marked kept", HistoryReply{Run: &job.Job{Kept: true}, RunUser: "alice"}, "without its command or holder"},
		{"kept run with a NUL", HistoryReply{Run: &job.Job{Command: []string{"py\x00"}}, RunUser: "alice"}, "a kept run"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Validate = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// FuzzDoctorReplies feeds the doctor's replies as they come off the wire
// through the decoder and Validate: nothing panics, and what is
// accepted is accepted again after a round trip.
func FuzzDoctorReplies(f *testing.F) {
	kept := HistoryReply{Run: &job.Job{Command: []string{"python", "train.py"}, Dir: "/srv/proj", Torchrun: true}, RunUser: "alice"}
	for _, m := range []any{goodHistory(), goodHealth(), HistoryReply{}, HealthReply{}, kept} {
		b, _ := json.Marshal(m)
		f.Add(b)
	}
	f.Add([]byte(`{"entries":[{"lease_id":"a-1","node":"a","gpus":[1e9]}]}`))
	f.Add([]byte(`{"buckets":[{"hour":"2026-03-02T09:00:00Z","seconds":-1}]}`))
	f.Add([]byte(`{"report":{"node":"n","squatted":[{"gpu":0,"users":["\u001b]0;pwn\u0007"]}]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var h HistoryReply
		if decode(b, &h, false) == nil && h.Validate() == nil {
			again, err := json.Marshal(h)
			if err != nil {
				t.Fatalf("re-encode an accepted history: %v", err)
			}
			var h2 HistoryReply
			if err := decode(again, &h2, false); err != nil || h2.Validate() != nil {
				t.Fatalf("an accepted history is refused after a round trip: %v", err)
			}
		}
		var r HealthReply
		if decode(b, &r, false) == nil && r.Validate() == nil {
			again, _ := json.Marshal(r)
			var r2 HealthReply
			if err := decode(again, &r2, false); err != nil || r2.Validate() != nil {
				t.Fatalf("an accepted report is refused after a round trip: %v", err)
			}
		}
	})
}
