//go:build race

package nemesis

// raceEnabled: the race detector slows every agent several times over, so
// the nemesis would measure it, not dibs (heals, failure detection).
const raceEnabled = true
