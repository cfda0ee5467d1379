package lease_test

import (
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/lease"
)

// TestNodeChoiceCheck: --nodelist and --exclude are refused at the edge,
// with words, when no node could satisfy them as written.
func TestNodeChoiceCheck(t *testing.T) {
	for _, tc := range []struct {
		nc   lease.NodeChoice
		want string
	}{
		{lease.NodeChoice{Only: []string{"na", "nb"}, Exclude: []string{"nc"}}, ""},
		{lease.NodeChoice{Only: []string{"na", "na"}}, "--nodelist names na twice"},
		{lease.NodeChoice{Exclude: []string{"-x"}}, "--exclude: node name"},
		{lease.NodeChoice{Only: []string{"na"}, Exclude: []string{"na"}}, "na is both in --nodelist and in --exclude"},
		{lease.NodeChoice{Only: make([]string, lease.MaxNodeList+1)}, "at most 64"},
	} {
		err := tc.nc.Check()
		if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%+v: %v, want %q", tc.nc, err, tc.want)
		}
	}
}
