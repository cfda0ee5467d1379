package main

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

// Shell completion asks the agent what exists: the caller's leases, their
// queued requests, the nodes and the people on the board. A completion
// runs on every Tab, so it asks with a short deadline and, when no agent
// answers, offers nothing and says nothing (a shell prints whatever a
// completion writes).

// completeTimeout bounds one completion's questions to the agent.
const completeTimeout = time.Second

func completeCtx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), completeTimeout)
}

// completeBoard fetches the board for a completion; ok is false when no
// agent answered.
func (c *cli) completeBoard() (api.Board, bool) {
	ctx, cancel := completeCtx()
	defer cancel()
	b, err := c.client().Board(ctx)
	if err != nil {
		return api.Board{}, false
	}
	return b.Escaped(), true
}

// callerLeases are the caller's leases on the board, in board order.
func callerLeases(b api.Board) []lease.Lease {
	var out []lease.Lease
	seen := map[string]bool{}
	for _, n := range b.Nodes {
		for _, g := range n.GPUs {
			for _, l := range held(g) {
				if seen[l.ID] || l.User != b.You.User || !l.ReservedUntil.IsZero() {
					continue
				}
				seen[l.ID] = true
				out = append(out, l)
			}
		}
	}
	return out
}

// held are the leases on a GPU: the one holding it whole, or those on its
// parts (MIG instances, budgets on a shared GPU).
func held(g api.GPU) []lease.Lease {
	if g.Lease != nil {
		return []lease.Lease{*g.Lease}
	}
	return g.Shares
}

// leaseWhat says what a lease holds, for a completion's description: "GPUs
// 2,3", "MIG instance MIG-…", "20.0G of GPU 1".
func leaseWhat(l lease.Lease) string {
	switch {
	case l.MIG != "":
		return "MIG instance " + l.MIG
	case l.MemMiB > 0:
		return mib(l.MemMiB) + " of GPU " + l.CUDAVisibleDevices()
	}
	return fmt.Sprintf("GPU%s %s", plural(len(l.GPUs)), l.CUDAVisibleDevices())
}

// completeMyBookings completes the ids of the caller's bookings that have
// not started, each with its GPUs and time.
func (c *cli) completeMyBookings(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	b, ok := c.completeBoard()
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, n := range b.Nodes {
		for _, bk := range n.Bookings {
			if bk.User != b.You.User || slices.Contains(args, bk.ID) || !strings.HasPrefix(bk.ID, toComplete) {
				continue
			}
			if bk.Group != "" && bk.Group != bk.ID {
				continue // a booking across nodes is offered once, by its first part's id
			}
			where := bk.Node
			if bk.Group != "" {
				where += " and the booking's other nodes"
			}
			desc := fmt.Sprintf("GPU%s %s on %s from %s for %s", plural(len(bk.GPUs)), bk.CUDAVisibleDevices(), where,
				bk.StartedAt.Local().Format("Mon Jan 2 15:04"), words.FormatDuration(bk.ExpiresAt.Sub(bk.StartedAt)))
			if bk.Note != "" {
				desc += ": " + bk.Note
			}
			out = append(out, cobra.CompletionWithDesc(bk.ID, desc))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeMyLeases completes lease ids of the caller's own leases, each
// described as `dibs ls` would; withSession keeps only those with a tmux
// session (attach); max is how many ids the command takes (0: any).
func (c *cli) completeMyLeases(withSession bool, max int) cobra.CompletionFunc {
	return func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if max > 0 && len(args) >= max {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		b, ok := c.completeBoard()
		if !ok {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		now := time.Now()
		var out []cobra.Completion
		for _, l := range callerLeases(b) {
			if slices.Contains(args, l.ID) || !strings.HasPrefix(l.ID, toComplete) || (withSession && l.Session == "") {
				continue
			}
			desc := fmt.Sprintf("%s on %s, %s left", leaseWhat(l), l.Node, timeLeft(l, now))
			if l.Note != "" {
				desc += ": " + l.Note
			}
			out = append(out, cobra.CompletionWithDesc(l.ID, desc))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeMyQueue completes the ids of the caller's waiting requests.
func (c *cli) completeMyQueue(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	b, ok := c.completeBoard()
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	ctx, cancel := completeCtx()
	defer cancel()
	q, err := c.client().Queue(ctx)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, e := range q.Entries {
		id := safe(e.ID)
		if e.User != b.You.User || e.Running || slices.Contains(args, id) || !strings.HasPrefix(id, toComplete) {
			continue
		}
		size := strconv.Itoa(e.GPUsPerNode)
		if e.Nodes > 1 {
			size = fmt.Sprintf("%dx%d", e.Nodes, e.GPUsPerNode)
		}
		out = append(out, cobra.CompletionWithDesc(id, fmt.Sprintf("position %d, %s GPU%s for %s", e.Position, size, plural(e.GPUsPerNode*max(e.Nodes, 1)), safe(e.Duration))))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeNodes completes node names, with their state and free GPUs.
func (c *cli) completeNodes(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	b, ok := c.completeBoard()
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, n := range b.Nodes {
		if !strings.HasPrefix(n.Name, toComplete) {
			continue
		}
		free := 0
		for i := range n.GPUs {
			if n.GPUs[i].Free(n.State) {
				free++
			}
		}
		out = append(out, cobra.CompletionWithDesc(n.Name, fmt.Sprintf("%s, %d of %s free", n.State, free, counted(len(n.GPUs), "GPU"))))
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// completeWho completes `dibs who`'s one argument: the people holding
// leases, then NODE:GPU for every GPU.
func (c *cli) completeWho(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	b, ok := c.completeBoard()
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	holds := map[string]int{}
	var users []string
	for _, n := range b.Nodes {
		for _, g := range n.GPUs {
			for _, l := range held(g) {
				if _, ok := holds[l.User]; !ok {
					users = append(users, l.User)
				}
				holds[l.User]++
			}
		}
	}
	slices.Sort(users)
	var out []cobra.Completion
	for _, u := range users {
		if strings.HasPrefix(u, toComplete) {
			out = append(out, cobra.CompletionWithDesc(u, fmt.Sprintf("holds %d GPU%s", holds[u], plural(holds[u]))))
		}
	}
	for _, n := range b.Nodes {
		for _, g := range n.GPUs {
			id := n.Name + ":" + strconv.Itoa(g.Index)
			if !strings.HasPrefix(id, toComplete) {
				continue
			}
			desc := "free"
			switch {
			case g.Lease != nil:
				desc = g.Lease.User
			case len(g.Shares) > 0:
				desc = "shared by " + partUsers(g.Shares)
			case !g.Free(n.State):
				desc = "not free"
			}
			out = append(out, cobra.CompletionWithDesc(id, desc))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// partUsers names the holders of a GPU's parts, each once: "alice, bob".
func partUsers(ls []lease.Lease) string {
	var names []string
	for _, l := range ls {
		if !slices.Contains(names, l.User) {
			names = append(names, l.User)
		}
	}
	return strings.Join(names, ", ")
}
