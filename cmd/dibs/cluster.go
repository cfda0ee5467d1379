package main

import (
	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/agent"
)

func (c *cli) clusterFlags(cmd *cobra.Command, f *agentFlags) {}

func (c *cli) applyClusterFlags(cmd *cobra.Command, f agentFlags, fc agent.FileConfig, cfg *agent.Config) error {
	return nil
}

func (c *cli) keygenCmd() *cobra.Command { return &cobra.Command{Use: "keygen", Hidden: true} }
