//go:build !wiregen_v010

package main

import (
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/lease"
)

// placeReply is the origin's answer to place as this release writes it:
// the job travels with it (it no longer travels in gossip). A protocol-6
// caller gets it cut to what v0.1.0 knows.
func placeReply(j *lease.Job) peer.PlaceReply { return peer.PlaceReply{Job: j} }
