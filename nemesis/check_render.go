package nemesis

import (
	"cmp"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
)

// ms writes a history time as milliseconds since the run started, the unit
// every line of a report uses.
func ms(t int64) string {
	if t == Never {
		return "never"
	}
	return fmt.Sprintf("%.1f", float64(t)/float64(time.Millisecond))
}

// span writes an interval of history time.
func span(from, to int64) string {
	if from == to {
		return ms(from) + " ms"
	}
	return ms(from) + "–" + ms(to) + " ms"
}

// opLine is one client operation as a person reads it in a violation.
func opLine(h *History, i int) string {
	o := &h.Ops[i]
	var b strings.Builder
	fmt.Fprintf(&b, "%s  client %d via %s: %s", span(o.Call, o.Return), o.Client, o.Via, o.Kind)
	switch o.Kind {
	case OpClaim:
		if o.GPUs != nil {
			fmt.Fprintf(&b, " %s GPUs %v", o.Node, o.GPUs)
		} else {
			fmt.Fprintf(&b, " %d GPUs on %s", o.Count, o.Node)
		}
		if o.RequestID != "" {
			fmt.Fprintf(&b, " (request %s)", o.RequestID)
		}
	case OpRelease, OpExtend:
		fmt.Fprintf(&b, " %s", o.LeaseID)
	case OpRead:
		fmt.Fprintf(&b, " board of %s", o.Node)
	case OpSubmit:
		fmt.Fprintf(&b, " at %s, %d node(s)", o.Node, o.Nodes)
	case OpCancel:
		fmt.Fprintf(&b, " %s", o.EntryID)
	}
	b.WriteString(" → ")
	b.WriteString(o.Outcome.String())
	switch {
	case o.Outcome == Refused:
		fmt.Fprintf(&b, " (%s)", o.Code)
	case o.Outcome == Unknown && o.Err != "":
		fmt.Fprintf(&b, " (%s)", words.OneLine(o.Err))
	case o.Outcome != OK:
	case o.Kind == OpClaim && o.Lease != nil:
		fmt.Fprintf(&b, " %s token %d GPUs %v", o.Lease.ID, o.Lease.Token, o.Lease.GPUs)
	case o.Kind == OpClaim:
		fmt.Fprintf(&b, " %s", o.LeaseID)
	case o.Kind == OpRead:
		b.WriteString(" " + holdersText(o.Holders))
	case o.Kind == OpSubmit:
		fmt.Fprintf(&b, " %s", o.EntryID)
	}
	return b.String()
}

// holdersText writes a read's answer: GPU index=lease, "-" for free.
func holdersText(m map[int]string) string {
	top := -1
	for g := range m {
		top = max(top, g)
	}
	parts := make([]string, 0, len(m))
	for g := 0; g <= top; g++ {
		id, ok := m[g]
		if !ok {
			continue
		}
		if id == "" {
			id = "-"
		}
		parts = append(parts, fmt.Sprintf("%d=%s", g, id))
	}
	return "[" + strings.Join(parts, " ") + "]"
}

// writeLine is one durable write as a person reads it in a violation.
func writeLine(h *History, i int) string {
	w := &h.Writes[i]
	var b strings.Builder
	fmt.Fprintf(&b, "%s  %s wrote #%d", span(w.Start, w.Done), w.Node, w.Seq)
	if w.Boot > 0 {
		fmt.Fprintf(&b, " (boot %d)", w.Boot)
	}
	switch w.Kind {
	case WritePut:
		l := &w.Lease
		fmt.Fprintf(&b, ": put %s token %d GPUs %v", l.ID, l.Token, l.GPUs)
		if !l.ReservedUntil.IsZero() {
			b.WriteString(" reserved")
		}
		if l.Entry != "" {
			fmt.Fprintf(&b, " entry %s", l.Entry)
			if l.Gang != "" {
				fmt.Fprintf(&b, " rank %d", l.Rank)
			}
		}
		if l.RequestID != "" {
			fmt.Fprintf(&b, " (request %s)", l.RequestID)
		}
	case WriteEnd:
		fmt.Fprintf(&b, ": end %s GPUs %v (%s)", w.Ledger.LeaseID, w.Ledger.GPUs, w.Ledger.Reason)
	case WritePutEntry:
		e := &w.Entry
		fmt.Fprintf(&b, ": put entry %s attempt %d", e.ID, e.Attempt)
		if e.Running {
			b.WriteString(" running")
		}
		if e.Nodes > 1 {
			fmt.Fprintf(&b, " (gang of %d)", e.Nodes)
		}
	case WriteDeleteEntry:
		fmt.Fprintf(&b, ": delete entry %s", w.EntryID)
	}
	return b.String()
}

// faultLine is one fault as a person reads it in a violation.
func faultLine(f *Fault) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s  nemesis: %s", span(f.Start, f.Healed), f.Kind)
	if len(f.Nodes) > 0 {
		fmt.Fprintf(&b, " %s", strings.Join(f.Nodes, ","))
	}
	if f.Detail != "" {
		fmt.Fprintf(&b, " (%s)", words.OneLine(f.Detail))
	}
	return b.String()
}

// byTime orders history lines by the time they start with (lines without
// one keep their place before the others), so a violation reads in order.
func byTime(lines []string) []string {
	at := func(l string) float64 {
		end := strings.IndexAny(l, "– ")
		if end < 0 {
			return -1
		}
		t, err := strconv.ParseFloat(l[:end], 64)
		if err != nil {
			return -1
		}
		return t
	}
	slices.SortStableFunc(lines, func(a, b string) int { return cmp.Compare(at(a), at(b)) })
	return lines
}
