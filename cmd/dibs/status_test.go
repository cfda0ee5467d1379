package main

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/api"
)

// TestStatusNamesClusterNameMismatches: `dibs status` says how many of the
// refused messages came from agents of another cluster name, so a wrong
// name does not read as a wrong key.
func TestStatusNamesClusterNameMismatches(t *testing.T) {
	s := api.Status{Node: "node01", Members: []api.Member{{Name: "node01", State: "alive"}}}
	for _, tc := range []struct {
		decrypt, label uint64
		want           string
	}{
		{0, 0, ", 0 decrypt failures, "},
		{5, 0, ", 5 decrypt failures, "},
		{7, 4, ", 7 decrypt failures (4 from another cluster name), "},
	} {
		s.Gossip = api.GossipCounter{DecryptFailures: tc.decrypt, LabelMismatches: tc.label}
		var b bytes.Buffer
		printStatus(&b, s)
		if !strings.Contains(b.String(), tc.want) {
			t.Errorf("status with %d decrypt failures, %d of another name, lacks %q:\n%s", tc.decrypt, tc.label, tc.want, b.String())
		}
	}
}

// TestStatusNamesOlderMembers: during a rolling upgrade `dibs status` says
// which members still run the older release, and nothing when all match.
func TestStatusNamesOlderMembers(t *testing.T) {
	for _, tc := range []struct {
		name    string
		members []api.Member
		want    string
	}{
		{"mixed", []api.Member{{Name: "node01", State: "alive", Protocol: 7}, {Name: "node02", State: "alive", Protocol: 6}, {Name: "node03", State: "dead"}},
			"mixed versions: node02 (protocol 6) run an older dibs than protocol 7; upgrade them to finish the roll"},
		{"all upgraded", []api.Member{{Name: "node01", State: "alive", Protocol: 7}, {Name: "node02", State: "alive", Protocol: 7}}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			printStatus(&b, api.Status{Node: "node01", Members: tc.members})
			got := strings.Contains(b.String(), "mixed versions")
			if got != (tc.want != "") || (tc.want != "" && !strings.Contains(b.String(), tc.want)) {
				t.Errorf("status:\n%s\nwant %q", b.String(), tc.want)
			}
		})
	}
}

// TestStatusShowsRefusedStreams: an idle-connection flood on the gossip
// port shows in `dibs status` as streams refused.
func TestStatusShowsRefusedStreams(t *testing.T) {
	s := api.Status{Node: "node01", Members: []api.Member{{Name: "node01", State: "alive"}}}
	for _, tc := range []struct {
		refused uint64
		want    string
		absent  bool
	}{
		{0, "streams refused", true},
		{48, ", 48 streams refused (over a cap or silent), ", false},
	} {
		s.Gossip = api.GossipCounter{StreamsRefused: tc.refused}
		var b bytes.Buffer
		printStatus(&b, s)
		if got := strings.Contains(b.String(), tc.want); got == tc.absent {
			t.Errorf("status with %d streams refused: contains %q = %v, want %v:\n%s", tc.refused, tc.want, got, !tc.absent, b.String())
		}
	}
}

// TestStatusColumnsSayWhatTheyHold: the members table names the gossip
// sequence number SEQ and shows each member's agent protocol, so nobody
// reads the counter as the dibs release (issue 30: the column was VERSION,
// and the upgrade loop in operations.md read it so).
func TestStatusColumnsSayWhatTheyHold(t *testing.T) {
	var b bytes.Buffer
	printStatus(&b, api.Status{Node: "node01", Version: "0.2.0", Members: []api.Member{
		{Name: "node01", Addr: "10.0.0.1:7946", State: "alive", StateVersion: 4213, Protocol: 7},
		{Name: "node02", Addr: "10.0.0.2:7946", State: "alive", StateVersion: 88},
	}})
	out := b.String()
	if strings.Contains(out, "VERSION") {
		t.Errorf("status still has a VERSION column:\n%s", out)
	}
	lines := strings.Split(out, "\n")
	var head, one, two string
	for _, l := range lines {
		switch {
		case strings.HasPrefix(l, "MEMBER"):
			head = l
		case strings.HasPrefix(l, "node01 "):
			one = l
		case strings.HasPrefix(l, "node02 "):
			two = l
		}
	}
	if f := strings.Fields(head); !slices.Equal(f, []string{"MEMBER", "ADDRESS", "STATE", "PROTOCOL", "SEQ", "LAST", "HEARD"}) {
		t.Errorf("header %q, want MEMBER ADDRESS STATE PROTOCOL SEQ LAST HEARD", head)
	}
	if f := strings.Fields(one); len(f) < 5 || f[3] != "7" || f[4] != "4213" {
		t.Errorf("node01's row %q, want protocol 7 and seq 4213", one)
	}
	if f := strings.Fields(two); len(f) < 5 || f[3] != "-" || f[4] != "88" {
		t.Errorf("node02's row %q, want protocol - (not known) and seq 88", two)
	}
	if !strings.HasPrefix(out, "node node01  dibs 0.2.0 ") {
		t.Errorf("first line %q does not name this node's dibs release", lines[0])
	}
}
