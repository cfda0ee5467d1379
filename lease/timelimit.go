package lease

import (
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

// CheckDuration is the time limit a lease, booking or queued request of
// kind k gets under policy p: the kind's default when none was asked for,
// else d itself, refused when it is not positive or over the kind's
// maximum. Every path that grants time calls it, so the words of the
// refusal are the same wherever it is asked.
func CheckDuration(d time.Duration, k Kind, p Policy) (time.Duration, error) {
	def, max := p.Limits(k)
	if d == 0 {
		return def, nil
	}
	if d < 0 {
		return 0, refusal.Invalidf("duration must be positive, got %s", words.FormatDuration(d))
	}
	if d > max {
		return 0, refusal.Invalidf("%s is over the %s maximum of %s on this node: ask for less (--for %s)", words.FormatDuration(d), k, words.FormatDuration(max), words.FormatDuration(max))
	}
	return d, nil
}

// kindOrDefault is the kind a request asked for, interactive when it named
// none, refused when it names no kind dibs knows.
func kindOrDefault(k Kind) (Kind, error) {
	return parseKind(string(k), true)
}

// Limit is the kind and the time limit claim c gets under policy p: the
// one place a claim's defaults are applied (no kind is interactive, no
// duration is the kind's default), refused when the kind is unknown or the
// time is over the kind's maximum. The node that grants the claim applies
// it (Table.PlanClaim); the node that places it reads the span from it.
func (c Claim) Limit(p Policy) (Kind, time.Duration, error) {
	k, err := kindOrDefault(c.Kind)
	if err != nil {
		return "", 0, err
	}
	if k == KindService {
		return k, ServiceSpan, nil
	}
	d, err := CheckDuration(c.Duration, k, p)
	if err != nil {
		return "", 0, err
	}
	return k, d, nil
}
