package gossip

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
)

// hostileCmd is the process name that retitled and cleared an admin's
// terminal through `dibs ls`.
const hostileCmd = "\x1b]0;PWNED\x07\x1b[2J"

// escapedCmd is how every terminal must show it.
const escapedCmd = `\x1b]0;PWNED\x07\x1b[2J`

// hostileSnapshot is an 8-GPU node whose GPU 2 runs a process with a
// hostile name and owner, on a GPU with a hostile model and error.
func hostileSnapshot(t testing.TB, host string) nodeprobe.Snapshot {
	snap := testSnapshot(t, host)
	g := &snap.GPUs[2]
	g.Processes[0].Command = hostileCmd
	g.Processes[0].User = "eve\u202e"
	g.Model = "H100\u009b2J"
	g.Error = "lost\x07"
	snap.Host.DriverVersion = "550\u200b"
	return snap
}

// hostileMessages are messages a broken or hostile peer might send: some
// must be escaped on arrival, the others refused. They seed the fuzz
// targets.
func hostileMessages(t testing.TB) map[string][]byte {
	t.Helper()
	leases := func(note, user, session string) *stateMsg {
		l := testLease("gpu-node-01", 7, user, note, 0)
		l.Session = session
		return &stateMsg{Node: "gpu-node-01", BootID: "b1", BootedAt: 1, Seq: 2, Section: sectionLeases,
			Leases: &leaseSection{Leases: []lease.Lease{l}}}
	}
	out := map[string][]byte{
		"telemetry": mustEncode(t, msgState, &stateMsg{Node: "gpu-node-01", BootID: "b1", BootedAt: 1, Seq: 3, Section: sectionTelemetry,
			Telemetry: &telemetrySection{Snapshot: hostileSnapshot(t, "gpu-node-01\x1b[2J")}}),
		"note":        mustEncode(t, msgState, leases("fix \u202etxt.exe", "alice", "s")),
		"note-escape": mustEncode(t, msgState, leases(hostileCmd, "alice", "s")),
		"user":        mustEncode(t, msgState, leases("n", "al\x1bice", "s")),
		"session":     mustEncode(t, msgState, leases("n", "alice", "s\u200b")),
		"container":   mustEncode(t, msgState, withContainers(leases("n", "alice", "s"), "3f2a9c1b7d4e\u202e")),
		"tags": mustEncode(t, msgState, &stateMsg{Node: "gpu-node-01", BootID: "b1", BootedAt: 1, Seq: 3, Section: sectionTelemetry,
			Telemetry: &telemetrySection{Snapshot: nodeprobe.Snapshot{Host: nodeprobe.Host{Tags: []string{"h100", "nv\u202elink"}}}}}),
		"usage": mustEncode(t, msgState, &stateMsg{Node: "n1", BootID: "b", BootedAt: 1, Seq: 1, Section: sectionTelemetry, Telemetry: &telemetrySection{Usage: map[string]float64{"bob\u2066": 1}}}),
		"queue": mustEncode(t, msgState, &stateMsg{Node: "gpu-node-01", BootID: "b1", BootedAt: 1, Seq: 2, Section: sectionLeases,
			Leases: &leaseSection{Leases: []lease.Lease{}, Queue: []queue.QueueEntry{testEntry("gpu-node-01", 1, "run \u202etxt.exe")}}}),
		"response":      mustEncode(t, msgResponse, &responseMsg{ID: 1, From: "n1", ErrCode: refusal.CodeConflict, ErrMsg: "GPU 3 has " + hostileCmd + " on it"}),
		"response-bidi": mustEncode(t, msgResponse, &responseMsg{ID: 2, From: "n1", ErrCode: refusal.CodeConflict, ErrMsg: "held by \u202eecila"}),
	}
	js, _ := json.Marshal(&stateMsg{Node: "gpu-node-02", BootID: "b2", BootedAt: 1, Seq: 1, Section: sectionTelemetry,
		Telemetry: &telemetrySection{Snapshot: hostileSnapshot(t, "gpu-node-02")}})
	out["push-pull"] = mustEncode(t, msgPushPull, &pushPullMsg{From: "gpu-node-03", States: []json.RawMessage{js}})
	return out
}

// withContainers gives m's first lease the adopted containers ids.
func withContainers(m *stateMsg, ids ...string) *stateMsg {
	m.Leases.Leases[0].Containers = ids
	return m
}

// TestHostileTextFromPeers: text a peer forwards as it found it arrives
// escaped, so the node stays visible; text a correct agent checks where it
// is made is refused with the message.
func TestHostileTextFromPeers(t *testing.T) {
	msgs := hostileMessages(t)
	for _, name := range []string{"note", "note-escape", "user", "session", "container", "usage", "queue"} {
		t.Run("refuses "+name, func(t *testing.T) {
			_, err := decodeMessage(msgs[name])
			if err == nil {
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), "holds U+") {
				t.Errorf("err = %v, want it to name the character", err)
			}
			if !termsafe.Clean(err.Error()) {
				t.Errorf("the refusal itself is not terminal-safe: %q", err)
			}
		})
	}
	t.Run("refuses tags", func(t *testing.T) {
		// A node's tags are its pools, names an admin chose: a tag that is
		// not a plain name is refused, not escaped.
		_, err := decodeMessage(msgs["tags"])
		if err == nil || !strings.Contains(err.Error(), "pool or tag") || !termsafe.Clean(err.Error()) {
			t.Fatalf("err = %v, want a terminal-safe refusal naming the tag", err)
		}
	})
	t.Run("escapes telemetry", func(t *testing.T) {
		d, err := decodeMessage(msgs["telemetry"])
		if err != nil {
			t.Fatal(err)
		}
		s := d.State.Telemetry.Snapshot
		g := s.GPUs[2]
		for _, c := range []struct{ got, want string }{
			{g.Processes[0].Command, escapedCmd},
			{g.Processes[0].User, `eve\u202e`},
			{g.Model, `H100\u009b2J`},
			{g.Error, `lost\x07`},
			{s.Host.DriverVersion, `550\u200b`},
			{s.Host.Name, `gpu-node-01\x1b[2J`},
			{s.GPUs[3].Processes[0].Command, "python train.py --config configs/large.yaml"},
		} {
			if c.got != c.want {
				t.Errorf("got %q, want %q", c.got, c.want)
			}
		}
	})
	t.Run("escapes a refusal's message", func(t *testing.T) {
		for name, want := range map[string]string{"response": "GPU 3 has " + escapedCmd + " on it", "response-bidi": `held by \u202eecila`} {
			d, err := decodeMessage(msgs[name])
			if err != nil {
				t.Fatal(err)
			}
			if d.Response.ErrMsg != want {
				t.Errorf("%s: ErrMsg = %q, want %q", name, d.Response.ErrMsg, want)
			}
		}
	})
	t.Run("escapes push/pull states", func(t *testing.T) {
		d, err := decodeMessage(msgs["push-pull"])
		if err != nil {
			t.Fatal(err)
		}
		if got := d.States[0].Telemetry.Snapshot.GPUs[2].Processes[0].Command; got != escapedCmd {
			t.Errorf("command = %q, want %q", got, escapedCmd)
		}
	})
}

// TestHostileProcessNameCrossesTheCluster: a process named with escape
// sequences on one node shows, escaped, on the others, and the node stays
// visible; a lease whose note was stored before notes were checked is
// published escaped, not hidden. A crafted state with a hostile note, as a
// hostile peer would send it, is dropped.
func TestHostileProcessNameCrossesTheCluster(t *testing.T) {
	nodes := startCluster(t, 2, func(c *Config) { c.TelemetryInterval = 200 * time.Millisecond })
	src, dst := nodes[1], nodes[0]
	src.agent.setSnapshot(hostileSnapshot(t, src.cfg.NodeName))
	v := src.agent.setLeases("alice", "legacy \u202enote", 0)
	src.Publish(true)
	src.Publish(false)
	waitFor(t, 5*time.Second, func() (bool, string) {
		p, ok := dst.Peer(src.cfg.NodeName)
		if !ok || p.NodeState.Version < v || len(p.NodeState.Snapshot.GPUs) != 8 || len(p.NodeState.Leases) != 1 {
			return false, fmt.Sprintf("%s sees %+v", dst.cfg.NodeName, p.NodeState)
		}
		return true, ""
	})
	p, _ := dst.Peer(src.cfg.NodeName)
	if got := p.NodeState.Snapshot.GPUs[2].Processes[0].Command; got != escapedCmd {
		t.Errorf("process name arrived as %q, want %q", got, escapedCmd)
	}
	if got := p.NodeState.Leases[0].Note; got != `legacy \u202enote` {
		t.Errorf("legacy note arrived as %q, want it escaped", got)
	}
	checkAllClean(t, reflect.ValueOf(p.NodeState), "NodeState")

	// A hostile peer skips the origin's checks: its note is refused.
	l := testLease(src.cfg.NodeName, 999, "mallory", "\u202eevil", 5)
	crafted := mustEncode(t, msgState, &stateMsg{Node: src.cfg.NodeName, BootID: src.BootID(), BootedAt: src.bootedAt.UnixNano(),
		Seq: 1 << 40, Version: v + 100, Section: sectionLeases, Leases: &leaseSection{Leases: []lease.Lease{l}}})
	before := dst.Stats().Dropped
	dst.handleMessage(crafted)
	if dst.Stats().Dropped != before+1 {
		t.Errorf("dropped %d messages, want 1 more than %d", dst.Stats().Dropped, before)
	}
	p, _ = dst.Peer(src.cfg.NodeName)
	for _, got := range p.NodeState.Leases {
		if got.User == "mallory" {
			t.Errorf("the hostile lease was applied: %+v", got)
		}
	}
}

// checkAllClean fails for every string reachable from v that is not
// terminal-safe.
func checkAllClean(t testing.TB, v reflect.Value, path string) {
	t.Helper()
	switch v.Kind() {
	case reflect.String:
		if !termsafe.Clean(v.String()) {
			t.Errorf("%s = %q reached the agent unescaped", path, v.String())
		}
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			checkAllClean(t, v.Elem(), path)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				checkAllClean(t, v.Field(i), path+"."+v.Type().Field(i).Name)
			}
		}
	case reflect.Slice, reflect.Array:
		if v.Type().Elem().Kind() == reflect.Uint8 {
			return // raw JSON: the agent decodes and checks it
		}
		for i := range v.Len() {
			checkAllClean(t, v.Index(i), fmt.Sprintf("%s[%d]", path, i))
		}
	case reflect.Map:
		for _, k := range v.MapKeys() {
			checkAllClean(t, k, path+" key")
			checkAllClean(t, v.MapIndex(k), path+"["+k.String()+"]")
		}
	}
}
