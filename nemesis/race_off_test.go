//go:build !race

package nemesis

const raceEnabled = false
