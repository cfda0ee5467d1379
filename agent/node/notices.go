package node

import (
	"sync"
	"time"
)

// noticeKeep and noticeMax bound what a user is shown on their board and in
// `dibs ls`: the last few messages of the last half hour.
const (
	noticeKeep = 30 * time.Minute
	noticeMax  = 10
)

type notice struct {
	at   time.Time
	text string
	// lease, when set, is the lease the notice warns about: it stops
	// showing once that lease has ended ("ends in 10m … extend keeps it"
	// is wrong about a lease already released).
	lease string
}

// notices are messages for people, per uid; they have their own lock
// because they are not lease state.
type notices struct {
	mu    sync.Mutex
	byUID map[int][]notice
}

// Notify queues a message for uid's board and `dibs ls`. A warning about a
// lease names it (leaseID; empty for any other message), so Notices leaves
// it out once that lease is gone.
func (n *Node) Notify(uid int, leaseID, text string) {
	n.notices.add(uid, notice{at: n.deps.Clock.Now(), text: text, lease: leaseID})
	n.deps.Changed.Notify()
}

// add keeps x among uid's last noticeMax notices.
func (ns *notices) add(uid int, x notice) {
	ns.mu.Lock()
	defer ns.mu.Unlock()
	if ns.byUID == nil {
		ns.byUID = map[int][]notice{}
	}
	list := append(ns.byUID[uid], x)
	if len(list) > noticeMax {
		list = list[len(list)-noticeMax:]
	}
	ns.byUID[uid] = list
}

// Notices are uid's recent messages, newest first, each with its time;
// live says whether a lease still exists (a warning about one that does not
// is left out).
func (n *Node) Notices(uid int, live func(leaseID string) bool) []string {
	now := n.deps.Clock.Now()
	n.notices.mu.Lock()
	defer n.notices.mu.Unlock()
	list := n.notices.byUID[uid]
	var out []string
	for i := len(list) - 1; i >= 0; i-- {
		if now.Sub(list[i].at) < noticeKeep && (list[i].lease == "" || live(list[i].lease)) {
			out = append(out, list[i].at.Local().Format("15:04")+" "+list[i].text)
		}
	}
	return out
}
