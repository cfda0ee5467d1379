package core

import (
	"fmt"

	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/base/refusal"
)

// actor is who a request this node forwards to node acts for there: the
// caller's account name, which the receiving node turns into its own
// account of that name. A caller the kernel named by a uid with no account
// here has no name to send: dibs shows it as "uidNNNN", and on another node
// an account may well be called that. Such a caller is refused, saying why,
// rather than act there as whoever has that name.
func (b *Bound) actor(node string) (peer.Actor, error) {
	if b.c.UID >= 0 {
		if u, err := b.s.deps.Accounts.ByUID(b.c.UID); err != nil || u.Name != b.c.User {
			return peer.Actor{}, &refusal.Error{Code: refusal.CodeForbidden, Msg: fmt.Sprintf(
				"uid %d has no account on %s, so dibs will not act for it on %s (a name is what crosses nodes, and %q may be someone else there): ask whoever runs %s to create an account for uid %d, and work from it",
				b.c.UID, b.s.cfg.Node, node, b.c.User, b.s.cfg.Node, b.c.UID)}
		}
	}
	return peer.As(b.c.User), nil
}
