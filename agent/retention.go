package agent

import (
	"context"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

// ledgerCompactEvery is how often the ledger's old entries are folded.
const ledgerCompactEvery = time.Hour

// ledgerCompactBatch bounds the entries folded in one transaction, so a
// first pass over a long-neglected ledger holds the writer only briefly.
const ledgerCompactBatch = 20000

// keepLedger folds the ledger's entries older than LedgerKeep into a row
// per person and day (lease.CompactLedger), now and every hour, until ctx
// ends: a claim/release loop cannot grow the ledger without bound, and
// `dibs usage` and fair-share still count every GPU-second. A store that
// cannot compact (a test's fake) is left as it is.
func (a *Agent) keepLedger(ctx context.Context) {
	defer close(a.ledgerDone)
	lc, ok := a.store.(lease.LedgerCompactor)
	if !ok {
		return
	}
	keep := a.cfg.LedgerKeep
	if keep <= 0 {
		keep = lease.DefaultLedgerKeep
	}
	compact := func(now time.Time) {
		total := 0
		for range 100 {
			n, err := lc.CompactLedger(now.Add(-keep), ledgerCompactBatch)
			if err != nil {
				a.log.Warn("ledger: compact the old entries", "err", err)
				return
			}
			total += n
			if n < ledgerCompactBatch || ctx.Err() != nil {
				break
			}
		}
		if total > 0 {
			a.log.Info("ledger: folded old entries into a row per person and day", "entries", total, "older_than", words.FormatDuration(keep))
		}
	}
	compact(a.deps.Clock.Now())
	every(ctx, a.deps.Clock, ledgerCompactEvery, compact)
}

// every calls f with the time of each tick of c, period apart, until ctx
// ends: the agent's periodic chores (the ledger's compaction, doctor's
// GPU samples) run on it, so a test's fake clock drives them.
func every(ctx context.Context, c clock.Clock, period time.Duration, f func(now time.Time)) {
	t := c.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C():
			f(now)
		}
	}
}
