package lease

import (
	"errors"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
)

// MaxBookingNodes bounds how many nodes one booking may span: more than a
// cluster dibs is made for, few enough that a request cannot fan out
// without end.
const MaxBookingNodes = 64

// BookNodes chooses nodes for a booking of per GPUs on each of nodes
// distinct nodes over [start, end) (one node when the rest of a booking
// across nodes is booked already): each part is placed as BookNode places
// a booking of one node (pools, their limits, what is held or booked
// then), so the nodes chosen are ones that can each take their part. The
// names come back sorted; the first part's id will name the whole. When
// fewer nodes can take a part than asked for, the refusal says how many
// can and why the next one cannot.
func BookNodes(cands []Candidate, nodes, per int, model string, tags []string, pools Pools, user string, start, end time.Time) ([]string, error) {
	if nodes < 1 || nodes > MaxBookingNodes {
		return nil, refusal.Invalidf("a booking spans 1 to %d nodes, not %d", MaxBookingNodes, nodes)
	}
	if len(cands) < nodes {
		return nil, refusal.Errorf(refusal.CodeConflict, "asked to book %d nodes but only %d %s up: book fewer nodes (`dibs ls` shows the cluster)", nodes, len(cands), isAre(len(cands)))
	}
	left := slices.Clone(cands)
	var out []string
	for len(out) < nodes {
		name, err := BookNode(left, per, model, tags, pools, user, start, end)
		if err != nil {
			if len(out) == 0 {
				return nil, err
			}
			return nil, refusal.Errorf(refusal.CodeOf(err), "asked to book %d GPU%s on each of %d nodes %s but only %d node%s can take a part (%s); on the others: %s", per, plural(per), nodes, bookingSpan(start, end), len(out), plural(len(out)), strings.Join(out, ", "), errMsg(err))
		}
		out = append(out, name)
		left = slices.DeleteFunc(left, func(c Candidate) bool { return c.Node == name })
	}
	slices.Sort(out)
	return out, nil
}

func isAre(n int) string {
	if n == 1 {
		return "is"
	}
	return "are"
}

// errMsg is a refusal's words without its code.
func errMsg(err error) string {
	if e := (*refusal.Error)(nil); errors.As(err, &e) {
		return e.Msg
	}
	return err.Error()
}
