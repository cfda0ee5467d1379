package tui

import (
	"fmt"
	"slices"
	"strings"

	"charm.land/bubbles/v2/key"
	tea "charm.land/bubbletea/v2"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
)

// gridView is the board's main view: nodes × GPUs, the cursor, the
// selection, the filter, and the detail of the GPU under the cursor. It
// draws in grid.go and detail.go.
type gridView struct {
	*common

	views []nodeView
	sum   summary

	curNode, curCol int    // into views and views[curNode].cells
	curName         string // the cursor's identity, kept across boards
	curGPU          int
	curMIG          string // the MIG instance's UUID when the cursor is on one
	top             int    // first node block drawn

	selNode string
	sel     []int // GPU indices on selNode, sorted

	onlyMine bool
	filter   string

	hits []hit
}

// hit maps a rectangle of the last rendered frame to a GPU (col >= 0) or a
// node header (col < 0), for mouse clicks.
type hit struct {
	y, h, x0, x1 int
	node, col    int
}

// update handles a key of the board view.
func (g *gridView) update(msg tea.KeyPressMsg) tea.Cmd {
	k := g.keys
	switch {
	case key.Matches(msg, k.Clear):
		switch {
		case len(g.sel) > 0:
			g.sel, g.selNode = nil, ""
			g.setStatus(statusInfo, "selection cleared")
		case g.filter != "":
			g.filter = ""
			g.rebuild()
			g.setStatus(statusInfo, "filter cleared")
		}
	case key.Matches(msg, k.Up):
		g.moveNode(-1)
	case key.Matches(msg, k.Down):
		g.moveNode(1)
	case key.Matches(msg, k.Left):
		g.moveCol(-1)
	case key.Matches(msg, k.Right):
		g.moveCol(1)
	case key.Matches(msg, k.Select):
		g.toggleSelect()
	case key.Matches(msg, k.Claim):
		g.openClaim(false)
	case key.Matches(msg, k.Run):
		g.openClaim(true)
	case key.Matches(msg, k.Extend):
		if n, gp, l := g.cursorLease(); gp != nil && l == nil {
			g.setStatus(statusErr, g.noLease(n, gp, "extend"))
		} else if l != nil {
			g.openExtend(l)
		}
	case key.Matches(msg, k.Release):
		if n, gp, l := g.cursorLease(); gp != nil && l == nil {
			g.setStatus(statusErr, g.noLease(n, gp, "release"))
		} else if l != nil {
			g.openRelease(l)
		}
	case key.Matches(msg, k.Attach):
		_, _, l := g.cursorLease()
		return g.startAttach(l)
	case key.Matches(msg, k.Mine):
		g.onlyMine = !g.onlyMine
		g.rebuild()
		if g.onlyMine {
			g.setStatus(statusInfo, "showing only nodes where you hold GPUs — m shows all")
		} else {
			g.setStatus(statusInfo, "showing all nodes")
		}
	case key.Matches(msg, k.Filter):
		g.closeHelp()
		g.form = newFilterForm(g.st.input, g.filter)
	}
	return nil
}

// rebuild recomputes the grid from the board and keeps the cursor on the
// same GPU when it is still shown.
func (g *gridView) rebuild() {
	g.views, g.sum = buildViews(&g.board, g.filter, g.onlyMine)
	if len(g.views) == 0 {
		g.curNode, g.curCol = 0, 0
		return
	}
	ni := slices.IndexFunc(g.views, func(v nodeView) bool { return v.name == g.curName })
	if ni < 0 {
		ni = min(g.curNode, len(g.views)-1)
	}
	g.curNode = ni
	cells := g.views[ni].cells
	ci := slices.IndexFunc(cells, func(c cellView) bool { return c.gpu == g.curGPU && c.mig == g.curMIG })
	if ci < 0 {
		ci = slices.IndexFunc(cells, func(c cellView) bool { return c.gpu == g.curGPU })
	}
	if ci < 0 {
		ci = min(g.curCol, max(len(cells)-1, 0))
	}
	g.curCol = ci
	g.syncCursor()
}

func (g *gridView) syncCursor() {
	if len(g.views) == 0 {
		return
	}
	v := &g.views[g.curNode]
	g.curName = v.name
	if g.curCol < len(v.cells) {
		g.curGPU, g.curMIG = v.cells[g.curCol].gpu, v.cells[g.curCol].mig
	}
}

// cursorGPU returns the node and GPU under the cursor, nil when none. The
// cell under the cursor names its GPU by index: a node's GPUs need not be
// listed in index order, nor all shown.
func (g *gridView) cursorGPU() (*api.Node, *api.GPU) {
	if len(g.views) == 0 {
		return nil, nil
	}
	v := &g.views[g.curNode]
	n := &g.board.Nodes[v.idx]
	if g.curCol >= len(v.cells) {
		return n, nil
	}
	want := v.cells[g.curCol].gpu
	for i := range n.GPUs {
		if n.GPUs[i].Index == want {
			return n, &n.GPUs[i]
		}
	}
	return n, nil
}

// cursorLease returns the lease on the GPU under the cursor: on a MIG
// instance's cell, that instance's lease (nil while it is free); on a GPU
// held in budgets, the caller's budget, else the first.
func (g *gridView) cursorLease() (*api.Node, *api.GPU, *lease.Lease) {
	n, gp := g.cursorGPU()
	if gp == nil {
		return n, gp, nil
	}
	if v := &g.views[g.curNode]; g.curCol < len(v.cells) && v.cells[g.curCol].mig != "" {
		for i := range gp.Shares {
			if gp.Shares[i].MIG == v.cells[g.curCol].mig {
				return n, gp, &gp.Shares[i]
			}
		}
		return n, gp, nil
	}
	if gp.Lease == nil && len(gp.Shares) > 0 {
		for i := range gp.Shares {
			if gp.Shares[i].UID == g.board.You.UID {
				return n, gp, &gp.Shares[i]
			}
		}
		return n, gp, &gp.Shares[0]
	}
	return n, gp, gp.Lease
}

// noLease says why there is nothing to act on under the cursor: a free MIG
// instance (and how to claim it), or a GPU without a lease.
func (g *gridView) noLease(n *api.Node, gp *api.GPU, verb string) string {
	if v := &g.views[g.curNode]; g.curCol < len(v.cells) && v.cells[g.curCol].mig != "" {
		c := &v.cells[g.curCol]
		return fmt.Sprintf("MIG %s on %s is free: nothing to %s — claim it with dibs claim --node %s --mig %s", c.sub, n.Name, verb, n.Name, strings.Fields(c.sub)[0])
	}
	return fmt.Sprintf("GPU %d on %s has no lease to %s", gp.Index, n.Name, verb)
}

func (g *gridView) moveNode(d int) {
	if len(g.views) == 0 {
		return
	}
	g.curNode = min(max(g.curNode+d, 0), len(g.views)-1)
	g.curCol = min(g.curCol, max(len(g.views[g.curNode].cells)-1, 0))
	g.syncCursor()
}

func (g *gridView) moveCol(d int) {
	if len(g.views) == 0 {
		return
	}
	g.curCol = min(max(g.curCol+d, 0), max(len(g.views[g.curNode].cells)-1, 0))
	g.syncCursor()
}

// pruneSelection drops selected GPUs that are gone or no longer free.
func (g *gridView) pruneSelection() {
	if len(g.sel) == 0 {
		return
	}
	var n *api.Node
	for i := range g.board.Nodes {
		if g.board.Nodes[i].Name == g.selNode {
			n = &g.board.Nodes[i]
		}
	}
	g.sel = slices.DeleteFunc(g.sel, func(idx int) bool {
		if n == nil {
			return true
		}
		for i := range n.GPUs {
			if n.GPUs[i].Index == idx {
				return !n.GPUs[i].Free(n.State)
			}
		}
		return true
	})
}

func (g *gridView) isSelected(node string, gpu int) bool {
	return node == g.selNode && slices.Contains(g.sel, gpu)
}

func (g *gridView) toggleSelect() {
	n, gp := g.cursorGPU()
	if gp == nil {
		return
	}
	if i := slices.Index(g.sel, gp.Index); i >= 0 && n.Name == g.selNode {
		g.sel = slices.Delete(g.sel, i, i+1)
		g.setStatus(statusInfo, selectionText(g.selNode, g.sel))
		return
	}
	if v := &g.views[g.curNode]; g.curCol < len(v.cells) && v.cells[g.curCol].mig != "" {
		g.setStatus(statusErr, fmt.Sprintf("MIG %s is an instance, claimed one at a time: c claims a free one, space selects whole GPUs", v.cells[g.curCol].sub))
		return
	}
	if !gp.Free(n.State) {
		g.setStatus(statusErr, fmt.Sprintf("GPU %d on %s is not free: only free GPUs can be selected", gp.Index, n.Name))
		return
	}
	if n.Name != g.selNode {
		g.sel, g.selNode = nil, n.Name
	}
	g.sel = append(g.sel, gp.Index)
	slices.Sort(g.sel)
	g.setStatus(statusInfo, selectionText(g.selNode, g.sel))
}

func selectionText(node string, sel []int) string {
	if len(sel) == 0 {
		return "nothing selected"
	}
	return fmt.Sprintf("selected GPUs %s on %s — c claims them, r runs on them, esc clears", joinInts(sel), node)
}

// openClaim opens the claim (or run) form: for the selected GPUs; else for
// the free GPU under the cursor, exactly that one; else for a number of
// GPUs on the cursor's node.
func (g *gridView) openClaim(run bool) {
	n, gp := g.cursorGPU()
	if n == nil {
		g.setStatus(statusErr, "no node to claim on yet")
		return
	}
	node, gpus, picked := n.Name, []int(nil), false
	switch {
	case len(g.sel) > 0:
		node, gpus = g.selNode, slices.Clone(g.sel)
	case n.State != api.NodeAlive:
		g.setStatus(statusErr, fmt.Sprintf("%s is %s: its GPUs cannot be claimed now — move to a live node", n.Name, n.State))
		return
	case gp != nil && gp.Free(n.State):
		gpus, picked = []int{gp.Index}, true
	default:
		if v := &g.views[g.curNode]; g.curCol < len(v.cells) && v.cells[g.curCol].mig != "" && v.cells[g.curCol].kind == kindFree {
			g.closeHelp()
			g.form = newMIGClaimForm(g.st.input, run, node, v.cells[g.curCol].sub)
			return
		}
	}
	g.closeHelp()
	g.form = newClaimForm(g.st.input, run, node, gpus, picked)
}

func (g *gridView) click(mo tea.Mouse) {
	if mo.Button != tea.MouseLeft {
		return
	}
	for _, h := range g.hits {
		if mo.Y < h.y || mo.Y >= h.y+h.h || mo.X < h.x0 || mo.X >= h.x1 || h.node >= len(g.views) {
			continue
		}
		g.curNode = h.node
		if h.col >= 0 {
			g.curCol = h.col
		} else {
			g.curCol = min(g.curCol, max(len(g.views[h.node].cells)-1, 0))
		}
		g.syncCursor()
		return
	}
}
