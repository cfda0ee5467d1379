package peer

import (
	"fmt"
	"math"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

// UsageByDay asks a node for its GPU-seconds per user per day, for
// `dibs usage --chart`. A node of an older release does not know it and
// refuses the op: the requester then names the node as not counted, as
// it does a node that does not answer.
var UsageByDay = Endpoint[UsageByDayRequest, UsageByDayReply]{Name: "usage-by-day"}

// MaxUsageDays bounds the days of one request: a quarter and a day.
const MaxUsageDays = 93

// UsageByDayRequest gives the days as the requester's midnights, so every
// node splits at the same instants whatever its own time zone: the first
// is the window's start, each span runs to the next, the last to now.
type UsageByDayRequest struct {
	Cuts []time.Time `json:"cuts"`
}

// Validate implements Message.
func (r UsageByDayRequest) Validate() error {
	if len(r.Cuts) == 0 || len(r.Cuts) > MaxUsageDays {
		return refusal.Invalidf("usage of %d days (1 to %d)", len(r.Cuts), MaxUsageDays)
	}
	for i, c := range r.Cuts {
		if !words.ValidSince(c) || (i > 0 && !c.After(r.Cuts[i-1])) {
			return refusal.Invalidf("bad day %d", i)
		}
	}
	return nil
}

// UsageByDayReply is GPU-seconds per user, one map per requested day.
type UsageByDayReply struct {
	Days []map[string]float64 `json:"days"`
}

// Validate implements Message.
func (r UsageByDayReply) Validate() error {
	if len(r.Days) > MaxUsageDays {
		return refusal.Invalidf("usage of %d days", len(r.Days))
	}
	for _, d := range r.Days {
		if len(d) > 10000 {
			return refusal.Invalidf("usage of %d users in a day", len(d))
		}
		for u, s := range d {
			if !words.ValidUserName(u) || math.IsNaN(s) || math.IsInf(s, 0) || s < 0 {
				return fmt.Errorf("bad usage entry %q", truncate(u))
			}
		}
	}
	return nil
}
