package queue

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// CheckFeasible refuses, at submission, a request no node set of the cluster
// could ever serve, naming the limit, so it is not queued forever: more GPUs
// per node than any node has, more nodes than the cluster has, a model no
// node has, a pinned node that does not exist or is too small. Nodes that
// are down count (they may come back); GPUs count whatever their state.
// model is matched as a case-insensitive substring of the GPUs' model, ""
// meaning any; callers pass e.Model, which Schedule matches the same way.
// A node whose pools' limits refuse the entry for good (Pools.Refuses with
// nothing held: a pool not open to its user, a Duration over the pool's
// MaxTime, more GPUs per node than its MaxGPUs) does not count; when no node
// is left, the refusal is that limit's, naming the pool.
func CheckFeasible(e QueueEntry, nodes []lease.SchedNode, model string, pools lease.Pools) error {
	switch {
	case e.GPUsPerNode < 1:
		return refusal.Invalidf("say how many GPUs (-g N)")
	case e.Nodes < 1:
		return refusal.Invalidf("ask for at least one node")
	case e.Nodes > 1 && e.Node != "":
		return refusal.Invalidf("a request for %d nodes cannot be pinned to %s: drop the node, or ask for one node", e.Nodes, e.Node)
	case len(nodes) == 0:
		return &refusal.Error{Code: refusal.CodeUnavailable, Msg: "no node is known yet: `dibs ls` shows the cluster"}
	}
	if !e.NodeChoice.IsZero() {
		// Only the nodes its --nodelist/--exclude leave count, and every
		// name in them must be a node's.
		known := make([]string, len(nodes))
		var left []lease.SchedNode
		for i := range nodes {
			known[i] = nodes[i].Name
			if e.NodeChoice.Allows(nodes[i].Name) {
				left = append(left, nodes[i])
			}
		}
		if err := e.NodeChoice.Unknown(known); err != nil {
			return err
		}
		if len(left) < e.Nodes || len(left) == 0 {
			return e.NodeChoice.NoNodeLeft(e.Nodes, len(left))
		}
		nodes = left
	}
	want := strings.ToLower(model)
	of := ""
	if model != "" {
		of = fmt.Sprintf(" matching %q", model)
	}
	var models []string
	largest, big, tagged, ofModel := 0, 0, 0, 0
	pinned := -1
	var limited, pinnedLimited error
	for i := range nodes {
		if !lease.HasTags(nodes[i].Snap.Host.Tags, e.Tags) {
			continue
		}
		if err := pools.Refuses(nodes[i].Snap.Host.Tags, e.User, float64(e.GPUsPerNode), e.Duration, e.Duration > 0, nil); err != nil {
			if limited == nil {
				limited = err
			}
			if nodes[i].Name == e.Node {
				pinnedLimited = err
			}
			continue
		}
		tagged++
		n := 0
		for _, g := range nodes[i].Snap.GPUs {
			// A GPU split into MIG instances is never a whole GPU; a
			// budget needs a GPU with that much memory.
			fits := g.MIG != nodeprobe.MIGEnabled && g.MemoryTotalMiB >= e.MemMiB
			if e.MIG != "" {
				// A MIG request needs an instance it names.
				fits = lease.HasMIG(&g, e.MIG)
			}
			if want == "" || strings.Contains(strings.ToLower(g.Model), want) {
				ofModel++
				if fits {
					n++
				}
			}
			if m := termsafe.String(g.Model); m != "" && !slices.Contains(models, m) {
				models = append(models, m)
			}
		}
		largest = max(largest, n)
		if n >= e.GPUsPerNode {
			big++
		}
		if nodes[i].Name == e.Node {
			pinned = n
		}
	}
	switch {
	case pinnedLimited != nil:
		return pinnedLimited
	case limited != nil && tagged == 0:
		return limited
	}
	if tagged == 0 {
		return refusal.Invalidf("no node is in pool %s (%s): ask for one of those, or leave --pool out", strings.Join(e.Tags, "+"), lease.ClusterTags(nodes))
	}
	if e.MemMiB > 0 && largest == 0 && ofModel > 0 {
		return refusal.Invalidf("no GPU%s in the cluster has %s to share: ask for less", of, lease.FormatMem(e.MemMiB))
	}
	if e.MIG != "" && largest == 0 && (want == "" || ofModel > 0) {
		have := ""
		for i := range nodes {
			if p := lease.MIGProfiles(nodes[i].Snap); p != "" {
				have += fmt.Sprintf("; %s has %s", nodes[i].Name, p)
			}
		}
		if have == "" {
			return refusal.Invalidf("no node%s has a GPU split into MIG instances: ask for whole GPUs (-g N) or a budget (--mem)", poolOf(e.Tags))
		}
		return refusal.Invalidf("no node%s has a MIG instance %s (%s): ask for one of those, by profile, MIG- UUID or GPU:INDEX (`dibs ls` lists them)", poolOf(e.Tags), termsafe.String(e.MIG), strings.TrimPrefix(have, "; "))
	}
	if want != "" && ofModel == 0 {
		slices.Sort(models)
		return refusal.Invalidf("no node has a GPU%s (the cluster has %s): ask for one of those, or leave the model out", of, strings.Join(models, ", "))
	}
	if e.Node != "" {
		if pinned < 0 {
			if slices.ContainsFunc(nodes, func(n lease.SchedNode) bool { return n.Name == e.Node }) {
				return refusal.Invalidf("%s is not in pool %s: drop --node, or the pool", e.Node, strings.Join(e.Tags, "+"))
			}
			return refusal.Invalidf("no node named %q in the cluster: `dibs ls` shows the nodes", e.Node)
		}
		if pinned < e.GPUsPerNode {
			return refusal.Invalidf("%s has only %s%s; asked for %d: ask for at most %d, or for another node", e.Node, words.GPUCount(pinned), of, e.GPUsPerNode, pinned)
		}
		return nil
	}
	if e.GPUsPerNode > largest {
		return refusal.Invalidf("no node has %s%s (the largest has %d): ask for fewer, or for several nodes", words.GPUCount(e.GPUsPerNode), of, largest)
	}
	if e.Nodes > big {
		if big == len(nodes) {
			return refusal.Invalidf("the cluster has %d nodes; asked for %d: ask for at most %d", len(nodes), e.Nodes, big)
		}
		return refusal.Invalidf("only %d of the %d nodes have %s%s; asked for %d nodes × %d: ask for fewer nodes, or fewer GPUs per node", big, len(nodes), words.GPUCount(e.GPUsPerNode), of, e.Nodes, e.GPUsPerNode)
	}
	return nil
}

// poolOf names the pool a request is held to, for a refusal: " in pool
// a100", or "" for none.
func poolOf(tags []string) string {
	if len(tags) == 0 {
		return ""
	}
	return " in pool " + strings.Join(tags, "+")
}
