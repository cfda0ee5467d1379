//go:build wiregen_gossip

package main

import "github.com/dibs-gpu/dibs/gossip"

func gossipSamples() (map[string][]byte, error) { return gossip.WireSamples() }
func gossipDecode(b []byte) (string, error)     { return gossip.WireDecode(b) }
