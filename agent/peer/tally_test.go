package peer

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/outgrow/doctor"
)

func goodTally(waits, ranks int) doctor.Tally {
	t0 := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	t := doctor.Tally{Leases: 12, Overdue: 1, Preemptions: map[string]int{"quota": 2}, UserHours: map[string]float64{"alice": 3.5, "bob": 1},
		GangHours: 1, WeekUsers: map[int64][]string{2918: {"alice", "bob"}}, Ended: []string{"node01-7"}}
	for i := range waits {
		t.Waits = append(t.Waits, time.Duration(i)*time.Second)
	}
	for i := range ranks {
		t.GangRanks = append(t.GangRanks, doctor.GangRank{Entry: "node01-q3#0", Queued: t0, Start: t0.Add(time.Duration(i) * time.Second)})
	}
	return t
}

// A tally too large for one reply crosses in pages that add up to it, each
// under MaxBody.
func TestTallyPagesAddUp(t *testing.T) {
	for _, tt := range []struct{ waits, ranks int }{{0, 0}, {10, 3}, {TallyWaitsPerPage, 0}, {TallyWaitsPerPage*2 + 1, TallyRanksPerPage + 5}} {
		whole := goodTally(tt.waits, tt.ranks)
		var got doctor.Tally
		for p := 0; ; p++ {
			r := TallyPage(whole, p)
			if err := r.Validate(); err != nil {
				t.Fatalf("%d waits, %d ranks: page %d: %v", tt.waits, tt.ranks, p, err)
			}
			if b, _ := json.Marshal(r); len(b) > MaxBody {
				t.Fatalf("page %d is %d bytes, over %d", p, len(b), MaxBody)
			}
			got.Add(r.Tally)
			if !r.More {
				break
			}
		}
		if !reflect.DeepEqual(got.Waits, whole.Waits) || !reflect.DeepEqual(got.GangRanks, whole.GangRanks) || got.Leases != whole.Leases || !reflect.DeepEqual(got.UserHours, whole.UserHours) {
			t.Errorf("%d waits, %d ranks: the pages add up to %+v", tt.waits, tt.ranks, got)
		}
	}
}

func TestTallyValidate(t *testing.T) {
	for _, tt := range []struct {
		name string
		m    Message
		want string
	}{
		{"too many waits", TallyReply{Tally: goodTally(TallyWaitsPerPage+1, 0)}, "over"},
		{"a bad user", TallyReply{Tally: func() doctor.Tally { x := goodTally(1, 1); x.UserHours["\x1b[31m"] = 1; return x }()}, "bad user"},
		{"infinite hours", TallyReply{Tally: func() doctor.Tally { x := goodTally(1, 1); x.UserHours["alice"] = math.Inf(1); return x }()}, "bad user or GPU-hours"},
		{"a negative wait", TallyReply{Tally: func() doctor.Tally { x := goodTally(1, 1); x.Waits[0] = -1; return x }()}, "wait out of range"},
		{"a bad running lease", TallyRequest{Since: time.Now(), Running: []string{"../x"}}, "not a lease id"},
		{"a page far off", TallyRequest{Since: time.Now(), Page: 5000}, "out of range"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.m.Validate(); err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("Validate = %v, want %q", err, tt.want)
			}
		})
	}
	if err := (TallyReply{Tally: goodTally(5, 5)}).Validate(); err != nil {
		t.Errorf("a good tally: %v", err)
	}
}

// FuzzTallyReply: what another agent sends as its tally decodes bounded,
// and what passes Validate encodes again.
func FuzzTallyReply(f *testing.F) {
	for _, r := range []TallyReply{{}, {Tally: goodTally(3, 2), More: true}} {
		b, _ := json.Marshal(r)
		f.Add(b)
	}
	f.Add([]byte(`{"tally":{"user_hours":{"alice":1e400}}}`))
	f.Add([]byte(`{"tally":{"week_users":{"99999999999999":["a"]},"waits_ns":[-5]}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		var r TallyReply
		if decode(b, &r, false) == nil && r.Validate() == nil {
			if _, err := json.Marshal(r); err != nil {
				t.Fatalf("a valid tally does not encode: %v", err)
			}
		}
	})
}
