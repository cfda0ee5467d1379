package main

import (
	"context"
	"fmt"
	"time"

	"github.com/spf13/cobra"
)

// leaveCmd is `dibs leave`: this node leaves the cluster for good, as the
// package's removal says before it stops the agent. A plain stop (SIGTERM,
// `systemctl stop`) is a restart: the others keep the node's work for the
// grace.
func leaveCmd(c *cli) *cobra.Command {
	return &cobra.Command{
		Use:   "leave",
		Short: "Take this node out of the cluster for good and stop its agent (root or an admin)",
		Long: `Take this node out of the cluster for good: its agent tells the others it is
leaving and stops. They show the node as left and count the ranks of gangs
running here as lost at once, so those gangs fail (or requeue) without waiting
out the grace. Sessions running here are not stopped.

Stopping or restarting the agent (SIGTERM: systemctl stop, systemctl restart,
an upgrade) is not leaving: the others show the node as restarting and keep its
leases, ranks and gangs for the grace (queue.lost_after, 5 minutes by default).

The package's removal runs it: dibs leave; then stops the service.`,
		Args:              cobra.NoArgs,
		ValidArgsFunction: cobra.NoFileCompletions,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := reqCtx()
			defer cancel()
			cl := c.client()
			r, err := cl.Leave(ctx)
			if err != nil {
				return err
			}
			// The agent leaves and stops after it answered: wait (a few
			// seconds at most) until it no longer serves, so whoever runs
			// this next finds it gone.
			deadline := time.Now().Add(10 * time.Second)
			for time.Now().Before(deadline) {
				sctx, scancel := context.WithTimeout(context.Background(), time.Second)
				_, err := cl.Status(sctx)
				scancel()
				if err != nil {
					break
				}
				time.Sleep(100 * time.Millisecond)
			}
			fmt.Fprintf(c.stdout, "%s left the cluster for good and its agent stopped; start the agent again to rejoin\n", safe(r.Node))
			return nil
		},
	}
}
