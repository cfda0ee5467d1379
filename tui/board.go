package tui

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/charmbracelet/x/ansi"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// kind is what a GPU cell says at a glance. Each kind has its own symbol or
// word so the board reads the same without colour.
type kind int

const (
	kindFree kind = iota
	kindMine
	kindMineIdle
	kindTheirs
	kindIdle
	kindSquat
	kindOver
	kindDown
	numKinds
)

// Labels for the kinds that do not show a holder's name.
const (
	labelFree     = "·free"
	labelSelected = "✓free"
	labelMine     = "★mine"
	labelMineIdle = "★idle"
	labelIdle     = "zz idle"
	labelSquat    = "!squat"
	labelOver     = "⧖over"
	labelDown     = "? down"
	// markMine is the caller's mark, before a service's name on their
	// service's GPUs (★⚙vllm).
	markMine = "★"
)

// classify decides what a GPU cell shows. The order matters: an unknown GPU
// is never "free", and a problem (squatter, overdue, idle) outranks whose it
// is — except that the caller's own idle GPU stays marked as theirs.
func classify(n *api.Node, g *api.GPU, you lease.Caller) kind {
	switch {
	case n.State != api.NodeAlive || slices.Contains(g.Flags, api.FlagUnknown) || g.Error != "":
		return kindDown
	case slices.Contains(g.Flags, lease.FlagSquatted) || slices.Contains(g.Flags, lease.FlagOverBudget):
		return kindSquat
	case slices.Contains(g.Flags, lease.FlagOverdue):
		return kindOver
	case slices.Contains(g.Flags, lease.FlagIdle) && g.Lease != nil && g.Lease.UID == you.UID:
		return kindMineIdle
	case slices.Contains(g.Flags, lease.FlagIdle):
		return kindIdle
	case g.Lease != nil && g.Lease.UID == you.UID:
		return kindMine
	case g.Lease != nil:
		return kindTheirs
	case len(g.Shares) > 0 || g.MIG == nodeprobe.MIGEnabled:
		return partKind(g, you)
	case len(g.Processes) > 0:
		// Work without a lease is squatting even if the agent has not judged it.
		return kindSquat
	}
	return kindFree
}

// partKind is what a GPU held in parts (MIG instances, budgets) shows: mine
// when one part is the caller's, free while a MIG instance is free, theirs
// once every instance is held or when others share it.
func partKind(g *api.GPU, you lease.Caller) kind {
	for _, l := range g.Shares {
		if l.UID == you.UID {
			return kindMine
		}
	}
	if g.MIG == nodeprobe.MIGEnabled && len(g.Shares) < len(g.MIGDevices) {
		return kindFree
	}
	return kindTheirs
}

// partLabel is the word of a GPU held in parts: "MIG 1/3" (instances held
// of all), or "◐50G" (the budgets on a shared GPU).
func partLabel(g *api.GPU) string {
	if g.MIG == nodeprobe.MIGEnabled {
		return fmt.Sprintf("MIG %d/%d", len(g.Shares), len(g.MIGDevices))
	}
	var mib uint64
	for _, l := range g.Shares {
		mib += l.MemMiB
	}
	return fmt.Sprintf("◐%dG", (mib+512)/1024)
}

func cellLabel(k kind, g *api.GPU) string {
	if (len(g.Shares) > 0 || g.MIG == nodeprobe.MIGEnabled) && k != kindDown {
		if slices.Contains(g.Flags, lease.FlagOverBudget) {
			return "!budget"
		}
		if k != kindSquat && k != kindOver && k != kindIdle {
			return partLabel(g)
		}
	}
	if g.Lease != nil && g.Lease.Service != nil {
		// A service's GPU names the service even when idle: it is not
		// reclaimed for it (the idle colour and the services view say so).
		switch k {
		case kindMine, kindMineIdle:
			return markMine + svcLabel(g.Lease)
		case kindTheirs, kindIdle:
			return svcLabel(g.Lease)
		}
	}
	switch k {
	case kindFree:
		return labelFree
	case kindMine:
		if g.Lease != nil && g.Lease.Borrowed {
			return labelMine + "~"
		}
		return labelMine
	case kindMineIdle:
		return labelMineIdle
	case kindTheirs:
		if g.Lease != nil && g.Lease.Borrowed {
			// "~": borrowed beyond quota, may be preempted (the detail
			// pane says so in words).
			return holderName(g.Lease) + "~"
		}
		return holderName(g.Lease)
	case kindIdle:
		return labelIdle
	case kindSquat:
		return labelSquat
	case kindOver:
		return labelOver
	}
	return labelDown
}

// svcLabel is the cell of a GPU a service holds: its name after the
// service mark (⚙vllm), so a GPU held with no end reads apart from a run's;
// the detail pane says whose.
func svcLabel(l *lease.Lease) string { return svcMark + l.Service.Name }

func holderName(l *lease.Lease) string {
	if l == nil {
		return ""
	}
	if l.User != "" {
		return l.User
	}
	return "uid " + strconv.Itoa(l.UID)
}

// cellView is one GPU as the grid draws it, computed once per board.
type cellView struct {
	gpu     int // nvidia-smi index
	kind    kind
	label   string
	labelW  int
	util    int // -1 when unknown
	faded   bool
	leaseID string
	// mig is the UUID of the MIG instance the cell shows ("" for a whole
	// GPU); sub, its second line ("0:1 2g.20gb"), replaces the utilisation
	// bar NVML cannot give per instance.
	mig string
	sub string
	// profile is the instance's profile alone, for cells too narrow for sub.
	profile string
}

// migCells is one cell per MIG instance of g: its holder (★mine, the
// holder's name, ·free, or !squat for work on a free instance) over its
// GPU:INDEX and profile.
func migCells(g *api.GPU, you lease.Caller) []cellView {
	cells := make([]cellView, 0, len(g.MIGDevices))
	for _, d := range g.MIGDevices {
		c := cellView{gpu: g.Index, mig: d.UUID, util: -1, kind: kindFree, label: labelFree,
			sub: fmt.Sprintf("%d:%d %s", g.Index, d.Index, d.Profile), profile: d.Profile}
		held := false
		for i := range g.Shares {
			l := &g.Shares[i]
			if l.MIG != d.UUID {
				continue
			}
			held, c.leaseID = true, l.ID
			switch {
			case l.UID == you.UID && l.Service != nil:
				c.kind, c.label = kindMine, markMine+svcLabel(l)
			case l.UID == you.UID:
				c.kind, c.label = kindMine, labelMine
			case l.Service != nil:
				c.kind, c.label = kindTheirs, svcLabel(l)
			default:
				c.kind, c.label = kindTheirs, holderName(l)
			}
			if l.Borrowed {
				c.label += "~"
			}
		}
		if !held && slices.ContainsFunc(g.Processes, func(p nodeprobe.Process) bool { return p.MIGDevice == d.UUID }) {
			c.kind, c.label = kindSquat, labelSquat
		}
		c.labelW = ansi.StringWidth(c.label)
		cells = append(cells, c)
	}
	return cells
}

// nodeView is one node block of the grid.
type nodeView struct {
	idx   int // into Board.Nodes
	name  string
	state string
	model string
	// tags are the node's pools.
	tags []string
	free int
	// gpus counts the node's GPUs; cells may be more (one per MIG instance).
	gpus  int
	cells []cellView
	// split is set when a GPU shows as its MIG instances: the columns then
	// no longer number GPUs, so the ruler leaves them unnumbered.
	split bool
}

// summary is the cluster line of the header; it always counts the whole
// cluster, whatever the filter shows.
type summary struct {
	nodes, gpus, free, mine, down int
	// restarting counts nodes away within the grace (not in down).
	restarting int
}

// shortModel drops the vendor prefix every GPU carries.
func shortModel(m string) string {
	m = strings.TrimSpace(m)
	for _, p := range []string{"NVIDIA ", "Tesla "} {
		m = strings.TrimPrefix(m, p)
	}
	return m
}

func nodeModel(n *api.Node) string {
	if len(n.GPUs) == 0 {
		return "no GPUs"
	}
	m := shortModel(n.GPUs[0].Model)
	for i := range n.GPUs[1:] {
		if shortModel(n.GPUs[i+1].Model) != m {
			return "mixed GPUs"
		}
	}
	return m
}

// buildViews turns a board into the grid's node blocks, applying the filter
// and "only mine". A node shows when its name or model matches the filter or
// any GPU's holder or process owner does; inside a node shown because of a
// user, the other GPUs are faded (colour only: the symbols still tell).
func buildViews(b *api.Board, filter string, onlyMine bool) ([]nodeView, summary) {
	var sum summary
	sum.nodes = len(b.Nodes)
	filter = strings.ToLower(strings.TrimSpace(filter))
	views := make([]nodeView, 0, len(b.Nodes))
	for ni := range b.Nodes {
		n := &b.Nodes[ni]
		nv := nodeView{idx: ni, name: n.Name, state: n.State, model: nodeModel(n), tags: n.Host.Tags, gpus: len(n.GPUs), cells: make([]cellView, 0, len(n.GPUs))}
		switch n.State {
		case api.NodeAlive:
		case api.NodeRestarting:
			sum.restarting++
		default:
			sum.down++
		}
		nodeMatch := filter == "" || strings.Contains(strings.ToLower(n.Name), filter) || strings.Contains(strings.ToLower(nv.model), filter)
		anyCell, anyMine := false, false
		for gi := range n.GPUs {
			g := &n.GPUs[gi]
			k := classify(n, g, b.You)
			sum.gpus++
			if g.Free(n.State) {
				sum.free++
				nv.free++
			}
			mine := g.Lease != nil && g.Lease.UID == b.You.UID || slices.ContainsFunc(g.Shares, func(l lease.Lease) bool { return l.UID == b.You.UID })
			if mine {
				sum.mine++
				anyMine = true
			}
			userMatch := filter != "" && gpuUserMatches(g, filter)
			anyCell = anyCell || userMatch
			faded := (onlyMine && !mine) || (filter != "" && !nodeMatch && !userMatch)
			if g.MIG == nodeprobe.MIGEnabled && len(g.MIGDevices) > 0 && k != kindDown {
				// A split GPU is one cell per instance, so each holder shows.
				for _, c := range migCells(g, b.You) {
					c.faded = faded
					nv.cells = append(nv.cells, c)
				}
				nv.split = true
				continue
			}
			label := cellLabel(k, g)
			c := cellView{gpu: g.Index, kind: k, label: label, labelW: ansi.StringWidth(label), util: -1}
			if g.UtilizationPct != nil {
				c.util = min(max(*g.UtilizationPct, 0), 100)
			}
			if g.Lease != nil {
				c.leaseID = g.Lease.ID
			}
			c.faded = faded
			nv.cells = append(nv.cells, c)
		}
		if onlyMine && !anyMine {
			continue
		}
		if !nodeMatch && !anyCell {
			continue
		}
		views = append(views, nv)
	}
	return views, sum
}

func gpuUserMatches(g *api.GPU, filter string) bool {
	if g.Lease != nil && holderMatches(g.Lease, filter) {
		return true
	}
	for i := range g.Shares {
		if holderMatches(&g.Shares[i], filter) {
			return true
		}
	}
	for _, p := range g.Processes {
		if p.User != "" && strings.Contains(strings.ToLower(p.User), filter) {
			return true
		}
	}
	return false
}

// holderMatches reports whether the filter names l's holder or, for a
// service's lease, the service: the grid shows a service's GPUs by its name.
func holderMatches(l *lease.Lease, filter string) bool {
	if strings.Contains(strings.ToLower(holderName(l)), filter) {
		return true
	}
	return l.Service != nil && strings.Contains(strings.ToLower(l.Service.Name), filter)
}
