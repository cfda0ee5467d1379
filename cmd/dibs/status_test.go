package main

import (
	"bytes"
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
