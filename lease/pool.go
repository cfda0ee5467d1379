package lease

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

// A pool is the set of nodes carrying one tag (nodeprobe.Host.Tags, from
// each node's config): `--pool h100` and `--tag h100` both ask for a node
// with that tag. A pool may have limits (Policy.Pools): who may use its
// nodes, the longest time limit there, how many GPUs one person may hold in
// it at once. A node enforces the limits of every pool it is in, on every
// claim, whether the claim named the pool or not.

// PoolLimits are what one pool allows, from the config's [pools.NAME].
type PoolLimits struct {
	// MaxTime caps a lease's time limit on the pool's nodes; 0 leaves the
	// kind's maximum.
	MaxTime time.Duration
	// Users may use the pool's nodes; empty means everyone.
	Users []string
	// MaxGPUs is how many GPUs one person may hold in the pool at once
	// (a MIG or shared lease counts the share of its GPU it holds, as
	// quotas do); 0 means no limit.
	MaxGPUs int
}

// Pools are the limits of the pools that have any, by tag.
type Pools map[string]PoolLimits

// PoolsOf lists the tags of a node that have limits, sorted.
func (p Pools) PoolsOf(tags []string) []string {
	var out []string
	for _, t := range tags {
		if _, ok := p[t]; ok && !slices.Contains(out, t) {
			out = append(out, t)
		}
	}
	sort.Strings(out)
	return out
}

// PoolDenies says why user may not use a node with these tags ("pool h100
// is open to alice and bob only"), "" when they may.
func (p Policy) PoolDenies(tags []string, user string) string { return p.Pools.Denies(tags, user) }

// Denies is Policy.PoolDenies.
func (p Pools) Denies(tags []string, user string) string {
	for _, t := range p.PoolsOf(tags) {
		pl := p[t]
		if len(pl.Users) > 0 && !slices.Contains(pl.Users, user) {
			return fmt.Sprintf("pool %s is open to %s only", t, strings.Join(pl.Users, ", "))
		}
	}
	return ""
}

// PoolLimit applies the pools' maximum time to a lease of dur on a node
// with these tags: a time limit the person chose (explicit) over it is
// refused; a default one is cut to it.
func (p Policy) PoolLimit(tags []string, dur time.Duration, explicit bool) (time.Duration, error) {
	return p.Pools.Limit(tags, dur, explicit)
}

// Limit is Policy.PoolLimit.
func (p Pools) Limit(tags []string, dur time.Duration, explicit bool) (time.Duration, error) {
	for _, t := range p.PoolsOf(tags) {
		max := p[t].MaxTime
		if max <= 0 || dur <= max {
			continue
		}
		if explicit {
			return 0, refusal.Invalidf("%s is over pool %s's maximum of %s: ask for less (--for %s), or another pool", words.FormatDuration(dur), t, words.FormatDuration(max), words.FormatDuration(max))
		}
		dur = max
	}
	return dur, nil
}

// Refuses says why a lease of n GPUs (a fraction for part of one) for dur
// on a node with these tags breaks one of its pools' limits for user, nil
// when none does: the pool is not open to them, dur is over its MaxTime
// (only when the person chose dur: a default is cut to the maximum), or n
// with what they hold there (held, from ClusterView.PoolHeld) is over its
// MaxGPUs. Placement asks it of every node before choosing one, so a
// pool's limit refuses a request only when no other node could take it.
func (p Pools) Refuses(tags []string, user string, n float64, dur time.Duration, explicit bool, held map[string]float64) error {
	if why := p.Denies(tags, user); why != "" {
		return refusal.Errorf(refusal.CodeForbidden, "%s: ask for another pool", why)
	}
	if explicit {
		if _, err := p.Limit(tags, dur, true); err != nil {
			return err
		}
	}
	if why := p.QuotaRefuses(tags, n, held); why != "" {
		return refusal.Errorf(refusal.CodeConflict, "%s", why)
	}
	return nil
}

// QuotaRefuses says why n more GPUs break a pool's MaxGPUs, given what the
// person holds in each pool: "" when none does. Parts of GPUs count their
// share, so the sums are fractions: a hair of slack (shareSlack).
func (p Pools) QuotaRefuses(tags []string, n float64, held map[string]float64) string {
	for _, t := range p.PoolsOf(tags) {
		max := p[t].MaxGPUs
		if max <= 0 || held[t]+n <= float64(max)+ShareSlack {
			continue
		}
		h := held[t]
		switch {
		case h < ShareSlack:
			return fmt.Sprintf("pool %s allows %s per person and %s were asked for: ask for at most %d there, or outside the pool", t, words.GPUCount(max), words.FormatGPUs(n), max)
		case h >= float64(max)-ShareSlack:
			it := "it"
			if h > 1 {
				it = "one of them"
			}
			return fmt.Sprintf("pool %s allows %s per person and you hold %s there already: release %s (`dibs ls` shows its id), or ask outside the pool", t, words.GPUCount(max), words.FormatGPUs(h), it)
		default:
			return fmt.Sprintf("pool %s allows %s per person and you hold %s there: ask for at most %s more there, or outside the pool", t, words.GPUCount(max), words.FormatGPUs(h), words.FormatGPUs(float64(max)-h))
		}
	}
	return ""
}

// CheckTags refuses tags no node could carry: each is a short word of
// letters, digits, '-', '_' and '.'.
func CheckTags(tags []string) error {
	if len(tags) > words.MaxTags {
		return refusal.Invalidf("%d tags; at most %d", len(tags), words.MaxTags)
	}
	for _, t := range tags {
		if err := words.ValidNodeName(t); err != nil {
			return refusal.Invalidf("pool or tag %s must be 1 to 63 letters, digits, '-', '_' or '.'", words.QuoteInput(t))
		}
	}
	return nil
}

// ShareSlack is a hair of slack for sums of fractions of GPUs.
const ShareSlack = 1e-9

// ClusterTags lists the pools of the cluster, for a message.
func ClusterTags(nodes []SchedNode) string {
	var tags []string
	for i := range nodes {
		for _, t := range nodes[i].Snap.Host.Tags {
			if !slices.Contains(tags, t) {
				tags = append(tags, t)
			}
		}
	}
	if len(tags) == 0 {
		return "no node has a pool"
	}
	slices.Sort(tags)
	return "the pools are " + strings.Join(tags, ", ")
}
