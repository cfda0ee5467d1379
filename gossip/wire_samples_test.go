package gossip

// This file is copied, as gossip/zz_wire.go, into a release's gossip
// package (by TestFirstReleaseDecodesThisRelease, and by hand to make the
// fixtures of that release), and is this release's own in its tests
// (wire_fixture_test.go): one message of every type, encoded by the
// release's own code, and that release's decoder. One copy, so both
// releases encode the same messages. It uses only what every release
// since v0.1.0 has, and nothing of the tests.

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// WireSamples is one message of every type, as this release encodes it.
func WireSamples() (map[string][]byte, error) {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	l := lease.Lease{ID: "node01-7", Node: "node01", GPUs: []int{0, 1}, User: "alice", UID: 1001, Token: 7,
		Kind: lease.KindBatch, Note: "ablation sweep", StartedAt: t0, ExpiresAt: t0.Add(4 * time.Hour), Session: "dibs-node01-7"}
	// The entry is filled in place, by field: its type was lease.QueueEntry
	// in v0.1.0 and is queue.QueueEntry since, and this file builds in both.
	sec := &leaseSection{Leases: []lease.Lease{l}, QuietSince: map[int]time.Time{2: t0}}
	e := oneSample(&sec.Queue)
	e.ID, e.Origin, e.User, e.UID, e.SubmittedAt = "node01-q3", "node01", "bob", 1002, t0
	e.Nodes, e.GPUsPerNode, e.Duration, e.Kind, e.Note = 2, 2, time.Hour, lease.KindBatch, "gang"
	// The job is read from its JSON, which names no type: it was lease's Job
	// in v0.1.0 and is job.Job since, and this file builds in both.
	if err := json.Unmarshal([]byte(`{"command":["python","train.py"],"dir":"/home/bob"}`), &e.Job); err != nil {
		return nil, err
	}
	snap := nodeprobe.Snapshot{TakenAt: t0, Host: nodeprobe.Host{Name: "node01", CPUs: 64, MemoryMiB: 512000, Backend: "sim"},
		GPUs: []nodeprobe.GPU{{Index: 0, UUID: "GPU-00000000-0000-0000-0000-000000000000", Model: "NVIDIA L40S", MemoryTotalMiB: 46068}}}
	leases := stateMsg{Node: "node01", BootID: "0a1b2c3d4e5f6071", BootedAt: t0.UnixNano(), Seq: 3, Version: 9, Section: sectionLeases,
		Leases: sec}
	tel := stateMsg{Node: "node01", BootID: "0a1b2c3d4e5f6071", BootedAt: t0.UnixNano(), Seq: 4, Version: 9, Section: sectionTelemetry,
		Telemetry: &telemetrySection{Snapshot: snap, Usage: map[string]float64{"alice": 3600}}}
	raw, err := json.Marshal(leases)
	if err != nil {
		return nil, err
	}
	out := map[string][]byte{}
	for name, m := range map[string]struct {
		t messageType
		v any
	}{
		"state-leases":    {msgState, leases},
		"state-telemetry": {msgState, tel},
		"leave":           {msgLeave, leaveMsg{Node: "node02", BootID: "1b2c3d4e5f607182", BootedAt: t0.UnixNano()}},
		"request":         {msgRequest, requestMsg{ID: 42, From: "node02", Reply: "127.0.0.1:7946", Op: "claim", Body: json.RawMessage(`{"v":6,"actor":{"user":"alice"},"req":{"count":1}}`), TimeoutMS: 3000}},
		"response":        {msgResponse, responseMsg{ID: 42, From: "node01", Body: json.RawMessage(`{"released":["node01-7"]}`)}},
		"refusal":         {msgResponse, responseMsg{ID: 43, From: "node01", ErrCode: "conflict", ErrMsg: "GPU 0 is held by alice"}},
		"push-pull":       {msgPushPull, pushPullMsg{From: "node01", States: []json.RawMessage{raw}, Left: []leaveMsg{{Node: "node02", BootID: "1b2c3d4e5f607182", BootedAt: t0.UnixNano()}}}},
		"suspect":         {msgSuspect, suspectMsg{Node: "node02", BootID: "1b2c3d4e5f607182", By: "node01"}},
	} {
		b, err := encodeMessage(m.t, m.v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		out[name] = b
	}
	return out, nil
}

// WireDecode decodes any message with this release's decoder and says
// what it read, in words that do not depend on the release.
func WireDecode(b []byte) (string, error) {
	d, err := decodeMessage(b)
	if err != nil {
		return "", err
	}
	switch {
	case d.State != nil && d.State.Leases != nil:
		s := d.State.Leases
		return fmt.Sprintf("state %s seq %d: %d leases (%s by %s), %d queued (%s)", d.State.Node, d.State.Seq, len(s.Leases), s.Leases[0].ID, s.Leases[0].User, len(s.Queue), s.Queue[0].ID), nil
	case d.State != nil && d.State.Telemetry != nil:
		return fmt.Sprintf("telemetry %s seq %d: %d GPUs (%s)", d.State.Node, d.State.Seq, len(d.State.Telemetry.Snapshot.GPUs), d.State.Telemetry.Snapshot.GPUs[0].Model), nil
	case d.Leave != nil:
		return "leave " + d.Leave.Node, nil
	case d.Request != nil:
		return fmt.Sprintf("request %d %s from %s: %s", d.Request.ID, d.Request.Op, d.Request.From, d.Request.Body), nil
	case d.Response != nil:
		return fmt.Sprintf("response %d from %s: %s %s %s", d.Response.ID, d.Response.From, d.Response.Body, d.Response.ErrCode, d.Response.ErrMsg), nil
	case d.PushPull != nil:
		return fmt.Sprintf("push/pull from %s: %d states, %d left", d.PushPull.From, len(d.States), len(d.PushPull.Left)), nil
	case d.Suspect != nil:
		return fmt.Sprintf("suspect %s by %s", d.Suspect.Node, d.Suspect.By), nil
	}
	return "", fmt.Errorf("decoded nothing")
}

// oneSample makes *s hold one zero element and returns it, so a sample is
// filled without naming its type.
func oneSample[T any](s *[]T) *T {
	*s = make([]T, 1)
	return &(*s)[0]
}
