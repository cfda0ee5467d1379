package peer

import (
	"strings"
	"testing"
	"time"
)

// TestLogRunsValidate: what a node answers of its kept runs is checked as
// any network input: names that could not be a session or a log, too many
// runs, a bad rank.
func TestLogRunsValidate(t *testing.T) {
	good := LogRun{Lease: "node01-7", Session: "train", Log: "train-abc", Entry: "node01-q3#1", Rank: 1, At: time.Unix(1_800_000_000, 0)}
	for _, tc := range []struct {
		name string
		m    Message
		want string
	}{
		{"good", LogRunsReply{Runs: []LogRun{good}}, ""},
		{"good request", LogRunsRequest{Name: "node01-q3"}, ""},
		{"empty name", LogRunsRequest{}, "bad run name"},
		{"name with a space", LogRunsRequest{Name: "a b"}, "bad run name"},
		{"not a lease id", LogRunsReply{Runs: []LogRun{{Lease: "x", Session: "train"}}}, "not a lease id"},
		{"a path for a log", LogRunsReply{Runs: []LogRun{{Lease: "node01-7", Session: "train", Log: "../../etc/passwd"}}}, "bad session or log name"},
		{"no session", LogRunsReply{Runs: []LogRun{{Lease: "node01-7"}}}, "bad session or log name"},
		{"negative rank", LogRunsReply{Runs: []LogRun{{Lease: "node01-7", Session: "t", Rank: -1}}}, "bad queued request"},
		{"too many", LogRunsReply{Runs: make([]LogRun, 65)}, "over 64"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.m.Validate()
			if tc.want == "" && err != nil || tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)) {
				t.Errorf("Validate() = %v, want %q", err, tc.want)
			}
		})
	}
}
