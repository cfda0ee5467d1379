package lease

import (
	"slices"
	"strings"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

// NodeChoice is where a request may run, in SLURM's words: Only
// (--nodelist) names the nodes it may use, Exclude (--exclude) the nodes it
// must not; zero means anywhere. `--node X` is a list of one. Unlike
// SLURM's -w, which names nodes a job must include, a nodelist here is the
// set to choose from: a gang of N nodes takes N of them, a single-node
// request one. It is made and checked once at the edge (Check) and carried
// by the claim (not on the wire: the edge picks the node of a direct claim
// or a booking) and by a queued entry, which the scheduler places.
type NodeChoice struct {
	Only    []string `json:"nodelist,omitempty"`
	Exclude []string `json:"exclude,omitempty"`
}

// MaxNodeList bounds each of a NodeChoice's lists: more names than a
// cluster dibs is made for has nodes.
const MaxNodeList = 64

// IsZero reports whether the choice leaves every node open.
func (n NodeChoice) IsZero() bool { return len(n.Only) == 0 && len(n.Exclude) == 0 }

// Allows reports whether the request may run on node.
func (n NodeChoice) Allows(node string) bool {
	return (len(n.Only) == 0 || slices.Contains(n.Only, node)) && !slices.Contains(n.Exclude, node)
}

// Check refuses a choice no node could satisfy as written: a name that
// is not a node name, a list too long, a name twice, or a node both listed
// and excluded.
func (n NodeChoice) Check() error {
	for _, l := range []struct {
		flag  string
		names []string
	}{{"--nodelist", n.Only}, {"--exclude", n.Exclude}} {
		if len(l.names) > MaxNodeList {
			return refusal.Invalidf("%s names %d nodes; at most %d", l.flag, len(l.names), MaxNodeList)
		}
		for i, name := range l.names {
			if err := words.ValidNodeName(name); err != nil {
				return refusal.Wrapf(refusal.CodeInvalid, err, "%s: %v", l.flag, err)
			}
			if slices.Contains(l.names[:i], name) {
				return refusal.Invalidf("%s names %s twice", l.flag, name)
			}
		}
	}
	for _, name := range n.Only {
		if slices.Contains(n.Exclude, name) {
			return refusal.Invalidf("%s is both in --nodelist and in --exclude: drop it from one", name)
		}
	}
	return nil
}

// Filter is the candidates the choice allows.
func (n NodeChoice) Filter(cands []Candidate) []Candidate {
	if n.IsZero() {
		return cands
	}
	var out []Candidate
	for _, c := range cands {
		if n.Allows(c.Node) {
			out = append(out, c)
		}
	}
	return out
}

// Unknown refuses a choice that names a node the cluster does not have (a
// typo would otherwise narrow or widen it in silence); known lists the
// cluster's nodes.
func (n NodeChoice) Unknown(known []string) error {
	for _, name := range slices.Concat(n.Only, n.Exclude) {
		if !slices.Contains(known, name) {
			return refusal.Invalidf("no node named %s in the cluster (it has %s): `dibs ls` shows the nodes", name, strings.Join(known, ", "))
		}
	}
	return nil
}

// String says the choice for a person: "nodes na, nb", "not nc".
func (n NodeChoice) String() string {
	var parts []string
	if len(n.Only) > 0 {
		parts = append(parts, "on "+strings.Join(n.Only, ", ")+" only")
	}
	if len(n.Exclude) > 0 {
		parts = append(parts, "not on "+strings.Join(n.Exclude, ", "))
	}
	return strings.Join(parts, ", ")
}

// NoNodeLeft is the refusal of a request whose choice leaves fewer than
// want of the cluster's nodes.
func (n NodeChoice) NoNodeLeft(want, left int) error {
	if left == 0 {
		return refusal.Invalidf("--nodelist/--exclude leave no node (%s): name nodes of the cluster (`dibs ls`)", n)
	}
	return refusal.Invalidf("a %d-node request needs %d nodes, and --nodelist/--exclude leave %d (%s): ask for fewer nodes, or name more", want, want, left, n)
}
