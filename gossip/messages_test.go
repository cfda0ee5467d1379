package gossip

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// sampleMessages are real encoded messages of every type, for round-trip
// tests and as fuzz seeds.
func sampleMessages(t testing.TB) map[string][]byte {
	t.Helper()
	snap := testSnapshot(t, "gpu-node-01")
	snap.Host.Tags = []string{"h100", "nvlink"}
	r := rand.New(rand.NewPCG(3, 4))
	var leases []lease.Lease
	for g := range 3 {
		leases = append(leases, testLease("gpu-node-01", uint64(40+g), "alice", randomNote(r, 30), g, g+4))
	}
	msgs := map[string]any{
		"leases": &stateMsg{Node: "gpu-node-01", BootID: "0a1b2c3d4e5f6071", BootedAt: 1740830400000000000, Seq: 3, Version: 17,
			Section: sectionLeases, Leases: &leaseSection{Leases: leases, Queue: []queue.QueueEntry{testEntry("gpu-node-01", 1, "sweep")},
				Ended: []lease.EndedRun{{Entry: "gpu-node-01-q0#0", Lease: "gpu-node-01-39", Reason: lease.ExitReason(0), At: time.Unix(1740830400, 0)}}, QuietSince: map[int]time.Time{3: time.Unix(1740830000, 0)}}},
		"no-leases": &stateMsg{Node: "n1", BootID: "b", BootedAt: 1, Seq: 1, Section: sectionLeases, Leases: &leaseSection{Leases: []lease.Lease{}}},
		"partial": trimNotes(&stateMsg{Node: "gpu-node-01", BootID: "0a1b2c3d4e5f6071", BootedAt: 1740830400000000000, Seq: 4, Version: 18,
			Section: sectionLeases, Leases: &leaseSection{Leases: leases}}, 5),
		"telemetry": &stateMsg{Node: "gpu-node-01", BootID: "0a1b2c3d4e5f6071", BootedAt: 1740830400000000000, Seq: 9, Version: 20,
			Section: sectionTelemetry, Telemetry: &telemetrySection{Snapshot: snap, Usage: map[string]float64{"alice": 3600.5, "bob": 0}}},
		"leave":   &leaveMsg{Node: "gpu-node-01", BootID: "0a1b2c3d4e5f6071", BootedAt: 1740830400000000000},
		"suspect": &suspectMsg{Node: "gpu-node-01", BootID: "0a1b2c3d4e5f6071", By: "gpu-node-02"},
		"request": &requestMsg{ID: 1 << 40, From: "gpu-node-02", Reply: "10.0.0.2:7946", Op: "claim",
			Body: json.RawMessage(`{"count":2,"note":"sweep"}`), TimeoutMS: 3000},
		"response": &responseMsg{ID: 1 << 40, From: "gpu-node-01", Body: json.RawMessage(`{"lease":{"id":"gpu-node-01-42"}}`)},
		"refusal":  &responseMsg{ID: 7, From: "gpu-node-01", ErrCode: refusal.CodeConflict, ErrMsg: "GPU 3 is bob's until 14:00"},
	}
	types := map[string]messageType{"leases": msgState, "no-leases": msgState, "partial": msgState, "telemetry": msgState,
		"leave": msgLeave, "suspect": msgSuspect, "request": msgRequest, "response": msgResponse, "refusal": msgResponse}
	out := make(map[string][]byte)
	var states []json.RawMessage
	for name, m := range msgs {
		b, err := encodeMessage(types[name], m)
		if err != nil {
			t.Fatalf("encode %s: %v", name, err)
		}
		out[name] = b
		if s, ok := m.(*stateMsg); ok {
			js, _ := json.Marshal(s)
			states = append(states, js)
		}
	}
	pp, err := encodeMessage(msgPushPull, &pushPullMsg{From: "gpu-node-03", States: states,
		Left: []leaveMsg{{Node: "old-node", BootID: "ff", BootedAt: 5}}})
	if err != nil {
		t.Fatal(err)
	}
	out["push-pull"] = pp
	return out
}

func TestMessagesRoundTrip(t *testing.T) {
	for name, b := range sampleMessages(t) {
		t.Run(name, func(t *testing.T) {
			d, err := decodeMessage(b)
			if err != nil {
				t.Fatalf("decode: %v", err)
			}
			var v any
			switch d.Type {
			case msgState:
				v = d.State
			case msgLeave:
				v = d.Leave
			case msgSuspect:
				v = d.Suspect
			case msgRequest:
				v = d.Request
			case msgResponse:
				v = d.Response
			case msgPushPull:
				v = d.PushPull
				if len(d.States) != 4 || d.States[0].Node == "" {
					t.Errorf("push/pull decoded %d states", len(d.States))
				}
			}
			again, err := encodeMessage(d.Type, v)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(again, b) {
				t.Errorf("re-encoded message differs:\n got %q\nwant %q", again, b)
			}
		})
	}
}

// TestLeaseFieldsSurviveTheWire fills every field of lease.Lease, so a field
// added there later either travels or fails here.
func TestLeaseFieldsSurviveTheWire(t *testing.T) {
	var l lease.Lease
	v := reflect.ValueOf(&l).Elem()
	for i := range v.NumField() {
		f := v.Field(i)
		switch f.Kind() {
		case reflect.String:
			f.SetString("x" + v.Type().Field(i).Name)
		case reflect.Int, reflect.Int64:
			f.SetInt(int64(i + 1))
		case reflect.Uint64:
			f.SetUint(uint64(i + 1))
		case reflect.Bool:
			f.SetBool(true)
		case reflect.Float64:
			f.SetFloat(float64(i+1) / 64)
		case reflect.Slice:
			if f.Type().Elem().Kind() == reflect.String {
				f.Set(reflect.ValueOf([]string{"x" + v.Type().Field(i).Name}))
				continue
			}
			f.Set(reflect.ValueOf([]int{i}))
		case reflect.Pointer:
			if v.Type().Field(i).Name == "Mono" {
				continue // the store's alone: sanitize leaves it out of every message
			}
			if _, ok := f.Interface().(*job.Job); ok {
				f.Set(reflect.ValueOf(&job.Job{Command: []string{"python", "x.py"}, Dir: "/x", Name: "x", Torchrun: true}))
				continue
			}
			if _, ok := f.Interface().(*service.Service); ok {
				f.Set(reflect.ValueOf(&service.Service{Spec: service.Spec{Name: "llm", Port: 8000, Health: "/health", HealthCmd: "true", Preemptible: true},
					Status: service.Status{State: service.Healthy, Restarts: 2, Since: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC), PID: 4242}}))
				continue
			}
			t.Fatalf("lease.Lease.%s: test does not know how to fill a %s", v.Type().Field(i).Name, f.Type())
		case reflect.Struct:
			if _, ok := f.Interface().(time.Time); ok {
				f.Set(reflect.ValueOf(time.Date(2025, 1, 2, 3, 4, 5, i, time.UTC)))
				continue
			}
			t.Fatalf("lease.Lease.%s: test does not know how to fill a %s", v.Type().Field(i).Name, f.Type())
		default:
			t.Fatalf("lease.Lease.%s: test does not know how to fill a %s", v.Type().Field(i).Name, f.Type())
		}
	}
	l.Node = "n1"
	l.ID = "n1-1"
	// Values the lease's shape check accepts, every field still set: a
	// lease holds a MIG instance or a budget, so one of each.
	l.Kind, l.MIG = lease.KindBatch, ""
	l.Containers = []string{"3f2a9c1b7d4e"}
	l.CPUs = []string{"0-3,8"} // one list for its one GPU
	mig := l
	mig.ID, mig.MIG, mig.MemMiB = "n1-2", "MIG-x", 0
	m := &stateMsg{Node: "n1", BootID: "b", BootedAt: 1, Seq: 1, Section: sectionLeases, Leases: &leaseSection{Leases: []lease.Lease{l, mig}}}
	b, err := encodeMessage(msgState, m)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeState(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Leases.Leases, []lease.Lease{l, mig}) {
		t.Errorf("leases after the wire:\n got %+v\nwant %+v", got.Leases.Leases, []lease.Lease{l, mig})
	}
}

func TestDecodeRefuses(t *testing.T) {
	good := sampleMessages(t)
	state := func(mod func(*stateMsg)) []byte {
		m := &stateMsg{Node: "n1", BootID: "b", BootedAt: 1, Seq: 1, Section: sectionLeases,
			Leases: &leaseSection{Leases: []lease.Lease{testLease("n1", 1, "u", "", 0)}}}
		mod(m)
		b, err := encodeMessage(msgState, m)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	withHeader := func(b []byte, i int, v byte) []byte {
		b = bytes.Clone(b)
		b[i] = v
		return b
	}
	huge := append([]byte{byte(msgLeave), wireVersion, 0}, bytes.Repeat([]byte(" "), maxLeaveBytes+1)...)
	bomb := deflateBomb(t, msgLeave, maxLeaveBytes*4)
	for _, tt := range []struct {
		name string
		b    []byte
		want string
	}{
		{"empty", nil, "empty"},
		{"short", []byte{1, 1}, "shorter than a header"},
		{"unknown type", withHeader(good["leave"], 0, 99), "unknown message type"},
		{"future version", withHeader(good["leave"], 1, wireVersion+1), "wire version"},
		{"version zero", withHeader(good["leave"], 1, 0), "wire version"},
		{"unknown flag", withHeader(good["leave"], 2, 0x80), "unknown flags"},
		{"oversize", huge, "over the"},
		{"deflate bomb", bomb, "inflates past"},
		{"bad json", append([]byte{byte(msgLeave), wireVersion, 0}, "{"...), "decode"},
		{"bad node", state(func(m *stateMsg) { m.Node = "a b" }), "bad node name"},
		{"no boot", state(func(m *stateMsg) { m.BootID = "" }), "boot id"},
		{"seq zero", state(func(m *stateMsg) { m.Seq = 0 }), "sequence 0"},
		{"unknown section", state(func(m *stateMsg) { m.Section = "gpus" }), "unknown section"},
		{"two sections", state(func(m *stateMsg) { m.Telemetry = &telemetrySection{} }), "leases only"},
		{"lease of another node", state(func(m *stateMsg) { m.Leases.Leases[0].Node = "n2" }), "belongs to node"},
		{"negative gpu", state(func(m *stateMsg) { m.Leases.Leases[0].GPUs = []int{-1} }), "GPU index -1"},
		{"huge gpu", state(func(m *stateMsg) { m.Leases.Leases[0].GPUs = []int{5000} }), "GPU index 5000"},
		{"gpu twice", state(func(m *stateMsg) { m.Leases.Leases[0].GPUs = []int{1, 1} }), "twice"},
		{"no gpus", state(func(m *stateMsg) { m.Leases.Leases[0].GPUs = nil }), "holds 0 GPUs"},
		{"lease twice", state(func(m *stateMsg) { m.Leases.Leases = append(m.Leases.Leases, m.Leases.Leases[0]) }), "appears twice"},
		{"long note", state(func(m *stateMsg) { m.Leases.Leases[0].Note = strings.Repeat("n", maxWireNote+1) }), "note"},
		{"bad user name", state(func(m *stateMsg) { m.Leases.Leases[0].User = "-rf" }), "bad user"},
		{"bad MIG instance", state(func(m *stateMsg) { m.Leases.Leases[0].MIG = "GPU-0" }), "bad MIG instance"},
		{"share of a whole GPU", state(func(m *stateMsg) { m.Leases.Leases[0].Share = 0.5 }), "share 0.5"},
		{"too many containers", state(func(m *stateMsg) {
			for i := range job.MaxContainers + 1 {
				m.Leases.Leases[0].Containers = append(m.Leases.Leases[0].Containers, fmt.Sprintf("%012x", i))
			}
		}), fmt.Sprintf("%d adopted containers, over %d", job.MaxContainers+1, job.MaxContainers)},
		{"a container that is no id", state(func(m *stateMsg) { m.Leases.Leases[0].Containers = []string{"trainer"} }), "not a short container id"},
		{"cores for another number of GPUs", state(func(m *stateMsg) { m.Leases.Leases[0].CPUs = []string{"0-3", "4-7", "8-9"} }), "cores for 3 GPUs"},
		{"cores that are no CPU list", state(func(m *stateMsg) { m.Leases.Leases[0].CPUs = []string{"all"} }), "bad CPU list"},
		{"a GPU's local cores that are no CPU list", state(func(m *stateMsg) {
			m.Section, m.Leases = sectionTelemetry, nil
			m.Telemetry = &telemetrySection{Snapshot: nodeprobe.Snapshot{GPUs: []nodeprobe.GPU{{Index: 0, CPUs: "0-3,\x1b[2J"}}}}
		}), "GPU 0: CPU list"},
		{"bad telemetry gpu", state(func(m *stateMsg) {
			m.Section, m.Leases = sectionTelemetry, nil
			m.Telemetry = &telemetrySection{Snapshot: nodeprobe.Snapshot{GPUs: []nodeprobe.GPU{{Index: 2000}}}}
		}), "GPU index 2000"},
		{"too many tags", state(func(m *stateMsg) {
			m.Section, m.Leases = sectionTelemetry, nil
			tags := make([]string, words.MaxTags+1)
			for i := range tags {
				tags[i] = fmt.Sprintf("t%d", i)
			}
			m.Telemetry = &telemetrySection{Snapshot: nodeprobe.Snapshot{Host: nodeprobe.Host{Tags: tags}}}
		}), fmt.Sprintf("%d tags; at most %d", words.MaxTags+1, words.MaxTags)},
		{"overlong tag", state(func(m *stateMsg) {
			m.Section, m.Leases = sectionTelemetry, nil
			m.Telemetry = &telemetrySection{Snapshot: nodeprobe.Snapshot{Host: nodeprobe.Host{Tags: []string{strings.Repeat("t", 64)}}}}
		}), "pool or tag"},
		{"tag with an escape", state(func(m *stateMsg) {
			m.Section, m.Leases = sectionTelemetry, nil
			m.Telemetry = &telemetrySection{Snapshot: nodeprobe.Snapshot{Host: nodeprobe.Host{Tags: []string{"h100\x1b[2J"}}}}
		}), "pool or tag"},
		{"negative usage", state(func(m *stateMsg) {
			m.Section, m.Leases = sectionTelemetry, nil
			m.Telemetry = &telemetrySection{Usage: map[string]float64{"alice": -1}}
		}), "usage"},
		{"partial telemetry", state(func(m *stateMsg) {
			m.Section, m.Leases, m.Partial = sectionTelemetry, nil, true
			m.Telemetry = &telemetrySection{}
		}), "never partial"},
		{"request id 0", mustEncode(t, msgRequest, &requestMsg{From: "n1", Reply: "1.2.3.4:5", Op: "x"}), "id 0"},
		{"request without op", mustEncode(t, msgRequest, &requestMsg{ID: 1, From: "n1", Reply: "1.2.3.4:5"}), "bad op"},
		{"response message without code", mustEncode(t, msgResponse, &responseMsg{ID: 1, From: "n1", ErrMsg: "x"}), "without a code"},
		{"leave of nobody", mustEncode(t, msgLeave, &leaveMsg{BootID: "b"}), "bad node name"},
		{"push/pull with a bad state", mustEncode(t, msgPushPull, &pushPullMsg{From: "n1", States: []json.RawMessage{json.RawMessage(`{"n":"x"}`)}}), "state 0"},
		{"leave as push/pull", withHeader(good["leave"], 0, byte(msgPushPull)), "push/pull"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decodeMessage(tt.b)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want %q", err, tt.want)
			}
			if !errors.Is(err, errWire) {
				t.Errorf("err = %v does not wrap errWire", err)
			}
		})
	}
}

func mustEncode(t testing.TB, mt messageType, v any) []byte {
	t.Helper()
	b, err := encodeMessage(mt, v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// deflateBomb is a small message that inflates to n bytes.
func deflateBomb(t testing.TB, mt messageType, n int) []byte {
	t.Helper()
	b, err := frame(msgPushPull, bytes.Repeat([]byte("a"), n))
	if err != nil {
		t.Fatal(err)
	}
	b[0] = byte(mt)
	if len(b) > maxBytesFor(mt) {
		t.Fatalf("bomb is %d bytes", len(b))
	}
	return b
}

func TestNewerOrdersSections(t *testing.T) {
	s := func(boot string, at int64, seq uint64, partial bool) *stateMsg {
		return &stateMsg{BootID: boot, BootedAt: at, Seq: seq, Partial: partial}
	}
	for _, tt := range []struct {
		name    string
		a, b    *stateMsg
		current string
		want    bool
	}{
		{"higher revision", s("x", 1, 5, false), s("x", 1, 4, false), "", true},
		{"lower revision", s("x", 1, 3, false), s("x", 1, 4, false), "", false},
		{"same revision", s("x", 1, 4, false), s("x", 1, 4, false), "", false},
		{"full replaces partial", s("x", 1, 4, false), s("x", 1, 4, true), "", true},
		{"partial does not replace full", s("x", 1, 4, true), s("x", 1, 4, false), "", false},
		{"later boot", s("y", 2, 1, false), s("x", 1, 9, false), "", true},
		{"earlier boot", s("x", 1, 9, false), s("y", 2, 1, false), "", false},
		{"current boot wins even if earlier", s("x", 1, 1, false), s("y", 2, 9, false), "x", true},
		{"not current loses", s("y", 2, 9, false), s("x", 1, 1, false), "x", false},
	} {
		if got := newer(tt.a, tt.b, tt.current); got != tt.want {
			t.Errorf("%s: newer = %v, want %v", tt.name, got, tt.want)
		}
	}
}

// TestMessageSizes pins down which path a node's state takes. A gossip copy
// (and a direct UDP send) must fit packetBudget, or memberlist never sends
// it.
func TestMessageSizes(t *testing.T) {
	cfg, err := Config{NodeName: "gpu-node-with-a-long-name-01", Key: testKey}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{cfg: cfg, packetBudget: packetBudget(cfg)}
	if c.packetBudget != 1400-5-5-(2+len(DefaultClusterName))-29 {
		t.Errorf("packet budget = %d", c.packetBudget)
	}
	node := cfg.NodeName
	r := rand.New(rand.NewPCG(5, 6))
	longUser := strings.Repeat("u", 32)
	section := func(noteLen int) *stateMsg {
		var ls []lease.Lease
		for g := range 8 {
			ls = append(ls, testLease(node, uint64(1_000_000+g), longUser, randomNote(r, noteLen), g))
		}
		return &stateMsg{Node: node, BootID: "0123456789abcdef", BootedAt: time.Now().UnixNano(), Seq: 1 << 35, Version: 1 << 30, // a year-old boot's sequence (milliseconds)
			Section: sectionLeases, Leases: &leaseSection{Leases: ls}}
	}

	// 8 GPUs, one lease each, 32-character users, 200-character notes of
	// incompressible text: too big for a packet. It goes to every member
	// by TCP, and gossip carries a partial copy with the notes trimmed.
	worst := section(words.MaxNoteLen)
	wire := mustEncode(t, msgState, worst)
	if len(wire) <= c.packetBudget {
		t.Errorf("worst-case lease section is %d bytes, fits the %d-byte budget: update the doc comment on Cluster", len(wire), c.packetBudget)
	}
	cp := c.gossipCopy(worst, wire)
	if cp == nil || len(cp) > c.packetBudget {
		t.Fatalf("gossip copy of the worst case is %d bytes, budget %d", len(cp), c.packetBudget)
	}
	m, err := decodeState(cp)
	if err != nil || !m.Partial || len(m.Leases.Leases) != 8 || m.Leases.Leases[0].User != longUser {
		t.Fatalf("gossip copy = %+v, %v", m, err)
	}
	t.Logf("8 leases, 200-char notes: full %d bytes (TCP), gossip copy %d bytes with notes cut to %d", len(wire), len(cp), len(m.Leases.Leases[0].Note))

	// Typical notes fit one packet whole.
	typical := section(40)
	wire = mustEncode(t, msgState, typical)
	if len(wire) > c.packetBudget {
		t.Errorf("8 leases with 40-char notes are %d bytes, over the %d-byte budget", len(wire), c.packetBudget)
	}
	if cp := c.gossipCopy(typical, wire); !bytes.Equal(cp, wire) {
		t.Errorf("a lease section that fits is not gossiped whole")
	}
	t.Logf("8 leases, 40-char notes: %d bytes (UDP)", len(wire))

	// 8-GPU telemetry with a process on every GPU fits one packet.
	tel := &stateMsg{Node: node, BootID: "0123456789abcdef", BootedAt: 1, Seq: 1, Section: sectionTelemetry,
		Telemetry: &telemetrySection{Snapshot: testSnapshot(t, node), Usage: map[string]float64{longUser: 1e9, "alice": 12345.6}}}
	wire = mustEncode(t, msgState, tel)
	if len(wire) > c.packetBudget {
		t.Errorf("8-GPU telemetry is %d bytes, over the %d-byte budget", len(wire), c.packetBudget)
	}
	raw, _ := json.Marshal(tel)
	t.Logf("8-GPU telemetry: %d bytes (UDP), %d as plain JSON", len(wire), len(raw))

	// A queue too big for any packet: no gossip copy, TCP only.
	big := section(10)
	for i := range 40 {
		big.Leases.Queue = append(big.Leases.Queue, testEntry(node, uint64(i+1), randomNote(r, 150)))
	}
	if cp := c.gossipCopy(big, mustEncode(t, msgState, big)); cp != nil {
		t.Errorf("a 40-entry queue got a %d-byte gossip copy", len(cp))
	}

	// Meta stays far under memberlist's 512 bytes.
	if n := len(nodeMeta{WireMin: 1, WireMax: 1, BootedAt: time.Now(), BootID: strings.Repeat("b", maxBootID)}.encode()); n > 100 {
		t.Errorf("meta is %d bytes", n)
	}
}

func TestMetaRoundTrip(t *testing.T) {
	m := nodeMeta{WireMin: 1, WireMax: 3, BootedAt: time.Unix(0, 1740830400123456789), BootID: "abc123", Protocol: 7, ProtocolMax: 8}
	got, err := decodeMeta(m.encode())
	if err != nil {
		t.Fatal(err)
	}
	if got != (nodeMeta{Version: metaVersion, WireMin: 1, WireMax: 3, BootedAt: got.BootedAt, BootID: "abc123", Protocol: 7, ProtocolMax: 8}) || !got.BootedAt.Equal(m.BootedAt) {
		t.Errorf("got %+v, want %+v", got, m)
	}
	for _, b := range [][]byte{nil, []byte("serf"), append(m.encode()[:12], 200), append(m.encode()[:len(m.encode())-2], 8, 7)} {
		if _, err := decodeMeta(b); err == nil {
			t.Errorf("decodeMeta(%q) accepted", b)
		}
	}
	// A later meta version may append fields.
	if _, err := decodeMeta(append(m.encode(), 1, 2, 3)); err != nil {
		t.Errorf("meta with trailing fields: %v", err)
	}
}

// v010Meta is node meta as the first release (v0.1.0, e4e3039) writes it:
// meta version 2, wire 2 to 2, agent protocol 6 and nothing after it.
func v010Meta(bootID string) []byte {
	b := []byte{metaMagic, 2, 2, 2, 0, 0, 0, 0, 0, 0, 0, 1, byte(len(bootID))}
	b = append(b, bootID...)
	return append(b, 6)
}

// v010Compatible is the first release's compatible, as it was: the wire
// ranges overlap and the protocol byte equals its own (6).
func v010Compatible(m nodeMeta) bool {
	return m.WireMin <= 2 && m.WireMax >= 2 && m.Protocol == 6
}

func TestMetaVersionSkew(t *testing.T) {
	old, err := decodeMeta(v010Meta("0a1b"))
	if err != nil {
		t.Fatalf("v0.1.0 meta: %v", err)
	}
	if old.Protocol != 6 || old.ProtocolMax != 6 {
		t.Errorf("v0.1.0 meta reads as protocols %d to %d, want 6 to 6", old.Protocol, old.ProtocolMax)
	}
	for _, tt := range []struct {
		name     string
		them     nodeMeta
		lo, hi   uint8
		ok       bool
		wantText string
	}{
		{"same release", nodeMeta{WireMin: 2, WireMax: 2, Protocol: 6, ProtocolMax: 7}, 6, 7, true, ""},
		{"v0.1.0 beside this release", old, 6, 7, true, ""},
		{"the next release beside this one", nodeMeta{WireMin: 2, WireMax: 3, Protocol: 7, ProtocolMax: 8}, 6, 7, true, ""},
		{"two releases apart", nodeMeta{WireMin: 2, WireMax: 2, Protocol: 8, ProtocolMax: 9}, 6, 7, false, "agent protocols 8 to 9 and this agent 6 to 7: nodes may be at most one dibs release apart"},
		{"v0.1.0 two releases behind", old, 7, 8, false, "agent protocols 6 and this agent 7 to 8"},
		{"a newer-only wire", nodeMeta{WireMin: wireVersion + 1, WireMax: wireVersion + 2, Protocol: 7, ProtocolMax: 7}, 6, 7, false, "gossip wire versions"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.them.compatible(tt.lo, tt.hi)
			if (err == nil) != tt.ok || (err != nil && !strings.Contains(err.Error(), tt.wantText)) {
				t.Errorf("compatible = %v, want ok=%v (%q)", err, tt.ok, tt.wantText)
			}
		})
	}
	// What this release writes, v0.1.0 reads as protocol 6: it lets it in.
	mine, err := decodeMeta(nodeMeta{WireMin: minWireVersion, WireMax: wireVersion, BootID: "ab"}.withProtocols(6, 7).encode())
	if err != nil {
		t.Fatal(err)
	}
	asOld := mine
	asOld.ProtocolMax = asOld.Protocol // v0.1.0 does not read the byte after the protocol
	if !v010Compatible(asOld) {
		t.Errorf("v0.1.0 would refuse this release's meta %+v", mine)
	}
}

func TestKeys(t *testing.T) {
	k, err := GenerateKey()
	if err != nil || len(k) != KeySize {
		t.Fatalf("GenerateKey = %d bytes, %v", len(k), err)
	}
	k2, _ := GenerateKey()
	if bytes.Equal(k, k2) {
		t.Fatal("two keys are equal")
	}
	dir := t.TempDir()
	for _, tt := range []struct {
		name    string
		content []byte
		ok      bool
	}{
		{"base64", []byte(EncodeKey(k) + "\n"), true},
		{"base64 unpadded", []byte(strings.TrimRight(EncodeKey(k), "=")), true},
		{"raw", k, true},
		{"short raw", k[:31], false},
		{"base64 of 24 bytes", []byte(EncodeKey(k[:24])), false},
		{"empty", nil, false},
		{"text", []byte("this is not a key, it is a sentence that goes on\n"), false},
		{"huge", bytes.Repeat([]byte("a"), maxKeyFile+10), false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "_"))
			if err := os.WriteFile(p, tt.content, 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadKeyFile(p)
			if tt.ok {
				if err != nil || !bytes.Equal(got, k) {
					t.Errorf("ReadKeyFile = %x, %v; want the key", got, err)
				}
				return
			}
			if err == nil {
				t.Errorf("ReadKeyFile accepted %q", tt.content)
			} else if !strings.Contains(err.Error(), "dibs keygen") {
				t.Errorf("error %q does not say what to do", err)
			}
		})
	}
	if _, err := ReadKeyFile(filepath.Join(dir, "missing")); err == nil {
		t.Error("missing file accepted")
	}
}

func TestValidNodeName(t *testing.T) {
	for name, want := range map[string]bool{
		"gpu01": true, "gpu-01.lab.example.com": true, "node_3": true, "A": true,
		"": false, "-x": false, ".x": false, "a b": false, "a/b": false, "é": false, strings.Repeat("a", 254): false,
	} {
		if got := validNodeName(name); got != want {
			t.Errorf("validNodeName(%q) = %v, want %v", name, got, want)
		}
	}
}

// testEntry is a queue entry submitted at node.
func testEntry(node string, seq uint64, note string) queue.QueueEntry {
	return queue.QueueEntry{ID: queue.QueueID(node, seq), Origin: node, User: "alice", UID: 1001, SubmittedAt: time.Unix(1740830400, 0),
		Nodes: 1, GPUsPerNode: 2, Duration: time.Hour, Kind: lease.KindBatch, Note: note, Job: &job.Job{Command: []string{"python", "train.py"}, Dir: "/home/alice"}}
}
