// Package chart draws the small pictures dibs shows in a terminal:
// sparklines of a series over time and horizontal bars, as text. Both
// front ends use it (the board in tui, `dibs usage --chart` in cmd/dibs),
// so a picture reads the same in each. Plain mode draws with ASCII only,
// for NO_COLOR, TERM=dumb and logs: a chart must still read as text there.
//
// A Charm v2 charting library would fit better than our own code, but the
// well-kept one (NimbleMarkets/ntcharts, v0.4.0) is built on Charm v1; the
// renderer here is a few dozen lines with tests.
package chart

import (
	"math"
	"strings"
)

// None marks a point with no value (not reported, no sample): it is drawn
// as a gap, never as zero.
const None = -1

var (
	sparkBlocks = []rune("▁▂▃▄▅▆▇█")
	sparkASCII  = []rune("_.-=+*#@")
	// barEighths are the partial cells of a bar, one to seven eighths.
	barEighths = []rune("▏▎▍▌▋▊▉")
)

// Spark draws vals (each 0..max, or None) as one line of width cells, the
// newest at the right. With more values than cells, each cell shows the
// peak of the values it covers, so a short burst is not averaged away;
// with fewer, the line is padded on the left with blanks (no history yet
// is not idleness). None is drawn '·' (plain: ' ').
func Spark(vals []int, max, width int, plain bool) string {
	if width <= 0 {
		return ""
	}
	ramp, gap := sparkBlocks, '·'
	if plain {
		ramp, gap = sparkASCII, ' '
	}
	cells := Fold(vals, width)
	var b strings.Builder
	for range width - len(cells) {
		b.WriteByte(' ')
	}
	for _, v := range cells {
		if v < 0 || max <= 0 {
			b.WriteRune(gap)
			continue
		}
		v = min(v, max)
		// 0 is the lowest block, so an idle stretch shows as a floor
		// rather than as nothing; the top block needs the full max.
		b.WriteRune(ramp[v*(len(ramp)-1)/max])
	}
	return b.String()
}

// Fold reduces vals to at most n cells, each the peak of the values it
// covers (None only where all of them are None); the newest values keep
// the rightmost cells.
func Fold(vals []int, n int) []int {
	if n <= 0 {
		return nil
	}
	if len(vals) <= n {
		return vals
	}
	out := make([]int, n)
	for i := range out {
		lo, hi := i*len(vals)/n, (i+1)*len(vals)/n
		peak := None
		for _, v := range vals[lo:hi] {
			peak = max(peak, v)
		}
		out[i] = peak
	}
	return out
}

// Bar draws value/max as a bar of at most width cells: whole blocks, then
// the eighth that is left (plain: '#' for each whole cell and nothing
// for the rest). A value above zero always shows at least a sliver, so
// "a little" is not read as "none".
func Bar(value, max float64, width int, plain bool) string {
	if width <= 0 || !(max > 0) || !(value > 0) || math.IsInf(value, 0) {
		return ""
	}
	frac := math.Min(value/max, 1)
	eighths := int(math.Round(frac * float64(width) * 8))
	if eighths == 0 {
		eighths = 1
	}
	if plain {
		n := (eighths + 7) / 8 // a sliver rounds up to one '#'
		return strings.Repeat("#", n)
	}
	s := strings.Repeat("█", eighths/8)
	if r := eighths % 8; r > 0 {
		s += string(barEighths[r-1])
	}
	return s
}
