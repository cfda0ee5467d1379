//go:build wiregen_v010

package main

import (
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/lease"
)

// placeReply is the origin's answer to place as v0.1.0 wrote it: empty.
func placeReply(*lease.Job) peer.Empty { return peer.Empty{} }
