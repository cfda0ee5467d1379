package nemesis

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anishathalye/porcupine"

	"github.com/dibs-gpu/dibs/base/words"
)

// maxLines bounds the history printed with a violation.
const maxLines = 20

// minimizeBudget bounds the time spent shrinking one violation's history.
const minimizeBudget = 5 * time.Second

// explainChunk turns a chunk porcupine found not linearizable into a
// violation: the shortest failing prefix (binary search over the chunk's
// operations by call time), shrunk further to the operations it cannot do
// without, then printed.
func explainChunk(h *History, c *chunk, o CheckOptions) Violation {
	illegal := func(ops []gop) bool {
		return porcupine.CheckOperationsTimeout(gpuModel(c.init), porcupineOps(ops), o.Timeout) == porcupine.Illegal
	}
	lo, hi := 1, len(c.ops)
	for lo < hi {
		mid := (lo + hi) / 2
		if illegal(c.ops[:mid]) {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	prefix := c.ops[:hi]
	failing := hi - 1
	kept := minimize(prefix, failing, c.init.Holder, illegal, time.Now().Add(minimizeBudget))
	v := Violation{Check: CheckGPU, Subject: c.key.String(), What: describeFailure(c.init, kept, prefix[failing])}
	if c.init != (gpuState{}) {
		at := int64(0)
		if len(c.ops) > 0 {
			at = c.ops[0].call
		}
		v.History = append(v.History, fmt.Sprintf("(at %s ms: %s, from the history before)", ms(at), c.init))
		for _, g := range c.initFrom {
			v.History = append(v.History, gopLine(h, &g))
		}
	}
	v.History = append(v.History, trimLines(h, kept, prefix[failing])...)
	if o.VisualizeDir != "" {
		if path, err := visualize(o.VisualizeDir, c); err != nil {
			v.History = append(v.History, "(no visualization: "+words.OneLine(err.Error())+")")
		} else {
			v.History = append(v.History, "visualization: "+path)
		}
	}
	return v
}

// minimize drops from a failing prefix every operation it can do
// without: first whole leases (every operation naming one; not the lease
// holding the GPU when the chunk began, whose grant is not in it), then
// single reads and assertions. A shrunk history must still fail, and must
// pass without the failing operation, so what is left shows the same
// failure. It stops shrinking at deadline.
func minimize(prefix []gop, failing int, initHolder string, illegal func([]gop) bool, deadline time.Time) []gop {
	keep := make([]bool, len(prefix))
	for i := range keep {
		keep[i] = true
	}
	build := func(skip int) []gop {
		out := make([]gop, 0, len(prefix))
		for i, g := range prefix {
			if keep[i] && i != skip {
				out = append(out, g)
			}
		}
		return out
	}
	// Normally the prefix without its failing operation passes (the
	// binary search found it so), and every shrunk history must keep it
	// that way; where it does not, any failing history will do.
	needFailing := !illegal(build(failing))
	still := func() bool { return illegal(build(-1)) && (!needFailing || !illegal(build(failing))) }
	// Units: every operation naming a lease goes with it; a read of a free
	// GPU is a unit of its own. The failing operation's unit stays.
	byUnit := map[string][]int{}
	var units []string
	for i, g := range prefix {
		u := "lease " + g.in.ID
		if g.in.ID == "" {
			u = "read " + strconv.Itoa(i)
		}
		if _, ok := byUnit[u]; !ok {
			units = append(units, u)
		}
		byUnit[u] = append(byUnit[u], i)
	}
	var groups [][]int
	for _, u := range units {
		if !slices.Contains(byUnit[u], failing) && (initHolder == "" || u != "lease "+initHolder) {
			groups = append(groups, byUnit[u])
		}
	}
	dropGroups(groups, keep, still, deadline)
	// Then single operations that assert without changing anything.
	groups = groups[:0]
	for i, g := range prefix {
		if keep[i] && i != failing && !g.in.Step.mutates() {
			groups = append(groups, []int{i})
		}
	}
	dropGroups(groups, keep, still, deadline)
	return build(-1)
}

// dropGroups removes as many groups as it can while still() holds:
// all at once, else each half in turn, down to single groups.
func dropGroups(groups [][]int, keep []bool, still func() bool, deadline time.Time) {
	if len(groups) == 0 || time.Now().After(deadline) {
		return
	}
	set := func(v bool) {
		for _, g := range groups {
			for _, i := range g {
				keep[i] = v
			}
		}
	}
	set(false)
	if still() {
		return
	}
	set(true)
	if len(groups) == 1 {
		return
	}
	half := len(groups) / 2
	dropGroups(groups[:half], keep, still, deadline)
	dropGroups(groups[half:], keep, still, deadline)
}

// describeFailure says why the failing operation cannot happen: the state
// the other operations leave, played in the order they returned, and what
// the model says about the failing one there.
func describeFailure(init gpuState, kept []gop, failing gop) string {
	others := slices.DeleteFunc(slices.Clone(kept), func(g gop) bool {
		return g.in == failing.in && g.call == failing.call && g.ret == failing.ret
	})
	slices.SortStableFunc(others, func(a, b gop) int { return cmp.Compare(a.ret, b.ret) })
	s := init
	for _, g := range others {
		if ok, next := apply(s, g.in); ok {
			s = next
		}
	}
	if w := why(s, failing.in); w != "" {
		return w
	}
	return "no order of these operations keeps one holder at a time with growing tokens"
}

// trimLines prints a shrunk history, at most maxLines lines: the failing
// operation, those overlapping it, then the latest others.
func trimLines(h *History, kept []gop, failing gop) []string {
	if len(kept) > maxLines {
		overlaps := func(g gop) bool { return g.call <= failing.ret && g.ret >= failing.call }
		keep := make([]bool, len(kept))
		n := 0
		for i := len(kept) - 1; i >= 0; i-- {
			if overlaps(kept[i]) && n < maxLines {
				keep[i] = true
				n++
			}
		}
		for i := len(kept) - 1; i >= 0 && n < maxLines; i-- {
			if !keep[i] {
				keep[i] = true
				n++
			}
		}
		var out []gop
		for i, g := range kept {
			if keep[i] {
				out = append(out, g)
			}
		}
		lines := []string{fmt.Sprintf("(%d earlier operations left out)", len(kept)-len(out))}
		for i := range out {
			lines = append(lines, gopLine(h, &out[i]))
		}
		return lines
	}
	lines := make([]string, len(kept))
	for i := range kept {
		lines[i] = gopLine(h, &kept[i])
	}
	return lines
}

// gopLine is one model operation: when the model let it take effect, what
// it did, and the client operations and writes it came from.
func gopLine(h *History, g *gop) string {
	var from []string
	if g.op >= 0 {
		from = append(from, opLine(h, g.op))
	}
	for _, i := range g.more {
		from = append(from, opLine(h, i))
	}
	if g.write >= 0 {
		from = append(from, writeLine(h, g.write))
	}
	return fmt.Sprintf("%s  %s  ← %s", span(g.call, g.ret), g.in, strings.Join(from, "; "))
}

// visualize writes porcupine's HTML view of a chunk into dir.
func visualize(dir string, c *chunk) (string, error) {
	ops := porcupineOps(c.ops)
	end := int64(0)
	for _, op := range ops {
		if op.Return != Never {
			end = max(end, op.Return)
		}
		end = max(end, op.Call)
	}
	for i := range ops {
		if ops[i].Return == Never {
			ops[i].Return = end + 1
		}
	}
	model := gpuModel(c.init)
	_, info := porcupine.CheckOperationsVerbose(model, ops, time.Minute)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("make the visualization folder: %w", err)
	}
	at := int64(0)
	if len(c.ops) > 0 {
		at = c.ops[0].call
	}
	name := strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, fmt.Sprintf("%s-gpu%d-at%s.html", c.key.node, c.key.gpu, ms(at)))
	path := filepath.Join(dir, name)
	if err := porcupine.VisualizePath(model, info, path); err != nil {
		return "", fmt.Errorf("write the visualization: %w", err)
	}
	return path, nil
}
