package api

import (
	"maps"
	"slices"

	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/lease"
)

// Escaped returns b with every string made safe for a terminal
// (termsafe.String): process names and users from /proc, GPU and host
// strings, lease notes, user and node names, notices, services. A board carries text
// from every node, and anyone can name a process "\x1b]0;PWNED\x07"; front
// ends that print a board (the TUI, `dibs ls`) print this instead. b itself
// is never changed (boards are shared between sessions): a clean board is
// returned as it is, one with something to escape is copied first.
func (b Board) Escaped() Board {
	clean := true
	b.eachString(func(_ string, p *string) {
		if clean && !termsafe.Clean(*p) {
			clean = false
		}
	})
	if clean {
		return b
	}
	c := b.clone()
	c.eachString(func(_ string, p *string) { *p = termsafe.String(*p) })
	return c
}

// eachString visits every string of the board, through the EachString of
// the types it is made of, so a field added to a snapshot or a lease is
// covered here.
func (b *Board) eachString(f func(field string, p *string)) {
	f("self", &b.Self)
	f("you.user", &b.You.User)
	for i := range b.Notices {
		f("notice", &b.Notices[i])
	}
	for i := range b.Nodes {
		n := &b.Nodes[i]
		f("name", &n.Name)
		f("state", &n.State)
		f("addr", &n.Addr)
		n.Host.EachString(f)
		for j := range n.GPUs {
			g := &n.GPUs[j]
			g.GPU.EachString(f)
			for k := range g.Flags {
				f("flag", (*string)(&g.Flags[k]))
			}
			if g.Lease != nil {
				g.Lease.EachString(f)
			}
			for k := range g.Shares {
				g.Shares[k].EachString(f)
			}
			for k := range g.OverBudget {
				f("over_budget.user", &g.OverBudget[k].User)
			}
		}
		for j := range n.Bookings {
			n.Bookings[j].EachString(f)
		}
	}
	for i := range b.Services {
		b.Services[i].EachString(f)
	}
}

// cloneLease copies the slices and pointers of l that EachString reaches.
func cloneLease(l lease.Lease) lease.Lease {
	l.GPUs = slices.Clone(l.GPUs)
	l.Containers = slices.Clone(l.Containers)
	l.CPUs = slices.Clone(l.CPUs)
	if l.Job != nil {
		j := *l.Job
		j.Command = slices.Clone(j.Command)
		j.Env = maps.Clone(j.Env)
		l.Job = &j
	}
	if l.Service != nil {
		// Escaping writes through the pointer: the board passed in
		// shares the service with every session that shows it.
		svc := *l.Service
		if p := svc.Place; p != nil {
			place := *p
			place.Tags = slices.Clone(place.Tags)
			place.Nodelist, place.Exclude = slices.Clone(place.Nodelist), slices.Clone(place.Exclude)
			svc.Place = &place
		}
		l.Service = &svc
	}
	return l
}

// clone copies every slice and pointer of b that eachString reaches.
func (b Board) clone() Board {
	b.Notices = slices.Clone(b.Notices)
	b.Nodes = slices.Clone(b.Nodes)
	b.Services = slices.Clone(b.Services)
	for i := range b.Services {
		b.Services[i] = cloneLease(b.Services[i])
	}
	for i := range b.Nodes {
		n := &b.Nodes[i]
		n.GPUs = slices.Clone(n.GPUs)
		n.Host.Tags = slices.Clone(n.Host.Tags)
		n.Bookings = slices.Clone(n.Bookings)
		for j := range n.Bookings {
			n.Bookings[j] = cloneLease(n.Bookings[j])
		}
		for j := range n.GPUs {
			g := &n.GPUs[j]
			g.MIGDevices = slices.Clone(g.MIGDevices)
			g.Links = slices.Clone(g.Links)
			g.Processes = slices.Clone(g.Processes)
			g.Flags = slices.Clone(g.Flags)
			if g.Lease != nil {
				l := cloneLease(*g.Lease)
				g.Lease = &l
			}
			g.Shares = slices.Clone(g.Shares)
			for k := range g.Shares {
				g.Shares[k] = cloneLease(g.Shares[k])
			}
			g.OverBudget = slices.Clone(g.OverBudget)
		}
	}
	return b
}
