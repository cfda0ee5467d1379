//go:build wiregen_v010

package main

import (
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/lease"
)

// jobT and codeT are v0.1.0's job and refusal code (place_now.go has this
// release's).
type (
	jobT  = lease.Job
	codeT = lease.Code
)

// placeReply is the origin's answer to place as v0.1.0 wrote it: empty.
func placeReply(*jobT) peer.Empty { return peer.Empty{} }
