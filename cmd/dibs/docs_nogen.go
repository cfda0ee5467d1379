//go:build !gendocs

package main

import "github.com/spf13/cobra"

// extraCmds is empty in the binary people install; a build tagged gendocs
// adds the hidden gen-docs command the release uses (docs_gen.go).
func (c *cli) extraCmds() []*cobra.Command { return nil }
