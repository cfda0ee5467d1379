package core

import (
	"time"

	"github.com/dibs-gpu/dibs/agent/node"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
)

// A request's words read once, at the edge: what a claim, a run or a
// booking asks for, checked before anything is granted or queued.

// claimOf parses a claim request once, for every path a claim takes.
func claimOf(req api.ClaimRequest) (lease.Claim, *node.Run, error) {
	kind, err := lease.ParseKind(req.Kind)
	if err != nil {
		return lease.Claim{}, nil, err
	}
	var d time.Duration
	if req.Duration != "" {
		if d, err = lease.ParseDuration(req.Duration); err != nil {
			return lease.Claim{}, nil, err
		}
	}
	if req.Count < 0 {
		return lease.Claim{}, nil, lease.Invalidf("GPU count must be positive, got %d", req.Count)
	}
	if err := lease.CheckGPUs(req.GPUs); err != nil {
		return lease.Claim{}, nil, err
	}
	if req.Count > 0 && len(req.GPUs) > 0 {
		return lease.Claim{}, nil, lease.Invalidf("a count (%d) and GPU indices (%v) both say which GPUs: give one, not both", req.Count, req.GPUs)
	}
	if req.RequestID != "" && !lease.ValidRequestID(req.RequestID) {
		return lease.Claim{}, nil, lease.Invalidf("request id %q must be 8 to 64 letters, digits, '-' or '_'", req.RequestID)
	}
	c := lease.Claim{Count: req.Count, GPUs: req.GPUs, Duration: d, Note: req.Note, Kind: kind, Force: req.Force,
		MIG: req.MIG, Model: req.Model, Tags: req.Tags}
	if err := checkWant(&c, req.Mem); err != nil {
		return lease.Claim{}, nil, err
	}
	if req.Run == nil {
		return c, nil, nil
	}
	if err := checkRun(req.Run.Command, req.Run.Dir, req.Run.Name, req.Run.Env); err != nil {
		return lease.Claim{}, nil, err
	}
	// A run's exit status is recorded, so its end says how it went.
	return c, &node.Run{Name: req.Run.Name, Command: req.Run.Command, Dir: req.Run.Dir, UserEnv: req.Run.Env, RecordExit: len(req.Run.Command) > 0,
		Job: &lease.Job{Command: req.Run.Command, Dir: req.Run.Dir, Name: req.Run.Name}}, nil
}

// checkRun is every check a session's spec gets before anything is
// granted or queued.
func checkRun(command []string, dir, name string, env map[string]string) error {
	// Every bound a job is held to, its size as the agents send it too.
	if err := (&lease.Job{Command: command, Dir: dir, Name: name, Env: env}).Check(); err != nil {
		return err
	}
	if name != "" {
		if err := launch.CheckName(name); err != nil {
			return lease.Invalidf("%v", err)
		}
	}
	return nil
}

// checkWant reads the parts of a claim that ask for a MIG instance, a
// budget, a model or pools, refusing what no node could hold.
func checkWant(c *lease.Claim, mem string) error {
	if mem != "" {
		mib, err := lease.ParseMem(mem)
		if err != nil {
			return err
		}
		c.MemMiB = mib
	}
	if len(c.MIG) > lease.MaxNameLen || len(c.Model) > lease.MaxModelLen {
		return lease.Invalidf("the MIG instance or model is too long")
	}
	if err := lease.CheckText("MIG instance", c.MIG); err != nil {
		return err
	}
	if err := lease.CheckText("model", c.Model); err != nil {
		return err
	}
	return lease.CheckTags(c.Tags)
}
