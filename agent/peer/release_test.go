package peer

import (
	"context"
	"slices"
	"testing"
)

// releaseV7 is the release request as agents before HardReleaseSince
// decode it: the lease ids, no kill.
type releaseV7 struct {
	IDs []string `json:"ids"`
}

func (r releaseV7) Validate() error { return checkIDs(r.IDs) }

// TestReleaseKillToOlderAgents: a release with Kill reaches an agent of
// protocol 6 (strict: the field is pruned, not refused) and of protocol 7
// (lenient: the field is ignored), and each releases as before.
func TestReleaseKillToOlderAgents(t *testing.T) {
	for _, v := range []int{6, 7} {
		me, old := NewMux("n8"), NewMux("old")
		if err := old.SpeakAtMost(v); err != nil {
			t.Fatal(err)
		}
		me.SetTransport(pipe{from: "n8", to: old})
		var got []string
		Handle(old, Endpoint[releaseV7, ReleaseReply]{Name: "release"}, func(_ context.Context, _ string, _ Actor, r releaseV7) (ReleaseReply, error) {
			got = append(got, r.IDs...)
			return ReleaseReply{Released: r.IDs}, nil
		})
		r, err := Call(context.Background(), me, "old", Release, As("alice"), ReleaseRequest{IDs: []string{"old-3"}, Kill: true})
		if err != nil {
			t.Fatalf("protocol %d: a release with kill: %v", v, err)
		}
		if !slices.Equal(r.Released, []string{"old-3"}) || !slices.Equal(got, []string{"old-3"}) {
			t.Errorf("protocol %d: released %v, served %v; want old-3", v, r.Released, got)
		}
	}
}
