//go:build !wiregen_v010

package main

import (
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/job"
)

// jobT and codeT are this release's job and refusal code, which main.go
// names: job.Job and refusal.Code since lease was split (issue 32),
// lease.Job and lease.Code in v0.1.0 (place_v010.go).
type (
	jobT  = job.Job
	codeT = refusal.Code
)

// placeReply is the origin's answer to place as this release writes it:
// the job travels with it (it no longer travels in gossip). A protocol-6
// caller gets it cut to what v0.1.0 knows.
func placeReply(j *jobT) peer.PlaceReply { return peer.PlaceReply{Job: j} }
