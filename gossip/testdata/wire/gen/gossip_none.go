//go:build !wiregen_gossip

package main

import "errors"

func gossipSamples() (map[string][]byte, error) { return nil, nil }
func gossipDecode([]byte) (string, error) {
	return "", errors.New("built without the wiregen_gossip tag: gossip messages are not checked")
}
