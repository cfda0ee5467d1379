package node

import (
	"fmt"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/lease"
)

// The kept runs stay within each person's bounds, oldest out first, and
// one person's runs never push out another's.
func TestKeptRunsBounds(t *testing.T) {
	big := strings.Repeat("x", 10<<10)
	tests := []struct {
		name      string
		runs      int
		arg       string
		wantFirst int // the oldest run still kept
		wantLast  int
	}{
		{"few", 3, "train.py", 0, 2},
		{"past the count", MaxKeptRunsPerUser + 10, "train.py", 10, MaxKeptRunsPerUser + 9},
		{"past the bytes", 20, big, 20 - MaxKeptBytesPerUser/(len(big)+len("python")+2), 19},
		{"one over the bytes alone", 1, strings.Repeat("x", MaxKeptBytesPerUser+1), -1, -1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var k keptRuns
			k.keep(KeptRun{Lease: "node01-9999", User: "bob", Job: lease.Job{Command: []string{"bob.py"}}})
			for i := range tc.runs {
				k.keep(KeptRun{Lease: fmt.Sprintf("node01-%d", i), User: "alice", Job: lease.Job{Command: []string{"python", tc.arg}}})
			}
			for i := range tc.runs {
				_, ok := k.find(fmt.Sprintf("node01-%d", i))
				if want := tc.wantFirst >= 0 && i >= tc.wantFirst && i <= tc.wantLast; ok != want {
					t.Errorf("run %d kept %v, want %v", i, ok, want)
				}
			}
			if r, ok := k.find("node01-9999"); !ok || r.User != "bob" {
				t.Errorf("bob's run was pushed out by alice's")
			}
			total := 0
			for _, r := range k.byUser["alice"] {
				total += r.size()
			}
			if len(k.byUser["alice"]) > MaxKeptRunsPerUser || total > MaxKeptBytesPerUser {
				t.Errorf("alice keeps %d runs, %d bytes: over the bounds", len(k.byUser["alice"]), total)
			}
		})
	}
}
