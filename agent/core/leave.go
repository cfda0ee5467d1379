package core

import (
	"context"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
)

// Leave takes this node out of the cluster for good and stops its agent
// (`dibs leave`, run by the package's removal): root or an admin only.
func (b *Bound) Leave(context.Context) (api.LeaveResponse, error) {
	if err := b.write(); err != nil {
		return api.LeaveResponse{}, err
	}
	if !b.c.Admin {
		return api.LeaveResponse{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: "only root or an admin can take a node out of the cluster: run `sudo dibs leave`"}
	}
	if b.s.deps.Leave == nil {
		return api.LeaveResponse{}, refusal.Invalidf("this agent cannot leave on request")
	}
	b.s.log.Info("leaving the cluster for good", "by", b.c.User)
	b.s.deps.Leave()
	return api.LeaveResponse{Node: b.s.cfg.Node}, nil
}
