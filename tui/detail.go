package tui

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/chart"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/service"
)

// detail describes one GPU and its node for the board's panel.
type detail struct{ *common }

// detailLines describes the GPU under the cursor.
func (g *gridView) detailLines(w, maxH int) []string {
	n, gp := g.cursorGPU()
	if n == nil {
		return nil
	}
	sel := gp != nil && g.isSelected(n.Name, gp.Index)
	part := ""
	if v := &g.views[g.curNode]; g.curCol < len(v.cells) {
		part = v.cells[g.curCol].sub
	}
	return detail{g.common}.lines(n, gp, part, sel, w, maxH)
}

// lines describes g on n; part names the MIG instance under the cursor
// ("0:1 2g.20gb"), if any. Wide panes (beside the grid) get one labelled
// fact per line; the pane under the grid at 80 columns packs the same facts
// into fewer lines.
func (m detail) lines(n *api.Node, g *api.GPU, part string, selected bool, w, maxH int) []string {
	st := m.st
	if g == nil {
		return []string{m.titleRule(n.Name, w), " " + st.dim.render("this node reports no GPUs")}
	}
	title := fmt.Sprintf("%s · GPU %d", n.Name, g.Index)
	if part != "" {
		title = fmt.Sprintf("%s · MIG %s of GPU %d", n.Name, part, g.Index)
	}
	if selected {
		title += " · selected"
	}
	lines := []string{m.titleRule(title, w)}
	f := m.facts(n, g)
	const lw = 9
	var rows []string
	row := func(label, value string) {
		if value != "" {
			rows = append(rows, " "+st.label.render(padRight(label, lw))+truncate(value, w-1-lw))
		}
	}
	row("model", f.model)
	if g.Error != "" {
		row("problem", g.Error)
	}
	row("memory", f.memory)
	row("load", f.load)
	if c := m.charts(n, g, w-1-lw); len(c) == 2 {
		row("util", c[0])
		row("mem", c[1])
	}
	if f.lease == "" || n.State != api.NodeAlive {
		row("state", f.state)
	}
	if f.lease != "" {
		row("holder", f.holder)
		row("lease", f.lease)
		row("time", f.time)
		row("session", f.session)
		row("note", f.note)
	}
	row("booked", f.booked)
	row("cores", f.cores)
	for i, p := range f.parts {
		label := ""
		if i == 0 {
			label = f.partsLabel
		}
		rows = append(rows, " "+st.label.render(padRight(label, lw))+truncate(p, w-1-lw))
	}
	if f.problem != "" {
		rows = append(rows, " "+st.statusErr.render(truncate(f.problem, w-1)))
	}
	if len(f.procs) == 0 && n.State == api.NodeAlive {
		row("procs", "none")
	}
	for i, p := range f.procs {
		label := ""
		if i == 0 {
			label = "procs"
		}
		rows = append(rows, " "+st.label.render(padRight(label, lw))+truncate(p, w-1-lw))
	}
	if 1+len(rows) <= maxH {
		lines = append(lines, rows...)
	} else {
		lines = append(lines, m.compactFacts(f, w)...)
	}
	// Room to spare (the pane beside a wide grid): what else a person
	// usually wants next: their own leases, then the node.
	if extra := m.yourLeases(w); len(extra) > 0 && len(lines)+len(extra) <= maxH {
		lines = append(lines, extra...)
	}
	if extra := m.nodeFacts(n, w); len(lines)+len(extra) <= maxH {
		lines = append(lines, extra...)
	}
	return lines
}

// compactFacts packs the facts into as few lines as they take, for the pane
// under the grid on small terminals.
func (m detail) compactFacts(f facts, w int) []string {
	st := m.st
	var lines []string
	add := func(parts ...string) {
		var kept []string
		for _, p := range parts {
			if p != "" {
				kept = append(kept, p)
			}
		}
		if len(kept) > 0 {
			lines = append(lines, " "+truncate(strings.Join(kept, " · "), w-1))
		}
	}
	add(f.model, prefixed("mem ", f.memory), f.load)
	// Two charts side by side: each gets half of the line, less its label.
	if c := m.charts(f.node, f.gpu, (w-1-len("util  · mem "))/2); len(c) == 2 {
		add("util "+c[0], "mem "+c[1])
	}
	if f.lease == "" || f.state != f.holder {
		add(f.state)
	}
	if f.lease != "" {
		add(f.holder, f.lease, f.time, prefixed("tmux ", f.session))
	}
	add(prefixed("note: ", f.note))
	add(prefixed("cores ", f.cores))
	for _, p := range f.parts {
		lines = append(lines, " "+truncate(f.partsLabel+" "+p, w-1))
	}
	if f.problem != "" {
		lines = append(lines, " "+st.statusErr.render(truncate(f.problem, w-1)))
	}
	for _, p := range f.procs {
		lines = append(lines, " "+truncate("proc "+p, w-1))
	}
	return lines
}

// charts draws g's utilization and memory over the last minutes, as the
// board saw them, in at most w cells each: the util line, then the memory
// line. The first says how far back they reach. Nil when there is not yet
// a second probe to draw, the node is not alive, or the pane is too narrow
// for a chart worth reading (the numbers above it stay). Under NO_COLOR
// the charts are ASCII. A GPU that reports no utilization (MIG) says so
// instead of drawing a floor of zeros.
func (m detail) charts(n *api.Node, g *api.GPU, w int) []string {
	if n == nil || g == nil || n.State != api.NodeAlive {
		return nil
	}
	pts := m.hist.of(n.Name, g.Index)
	span := ""
	if len(pts) >= 2 {
		span = "  " + words.FormatDuration(pts[len(pts)-1].at.Sub(pts[0].at))
	}
	w -= len(span)
	if len(pts) < 2 || w < sparkMin {
		return nil
	}
	util, mem := make([]int, len(pts)), make([]int, len(pts))
	reported := false
	for i, p := range pts {
		util[i], mem[i] = p.util, p.memPct
		reported = reported || p.util != chart.None
	}
	cells := min(len(pts), w)
	u := "not reported"
	if reported {
		u = chart.Spark(util, 100, cells, m.noColor) + span
	}
	return []string{u, chart.Spark(mem, 100, cells, m.noColor)}
}

// yourLeases lists the caller's leases across the cluster.
func (m detail) yourLeases(w int) []string {
	st := m.st
	var out []string
	seen := map[string]bool{}
	for ni := range m.board.Nodes {
		n := &m.board.Nodes[ni]
		var held []*lease.Lease
		for gi := range n.GPUs {
			g := &n.GPUs[gi]
			if g.Lease != nil {
				held = append(held, g.Lease)
			}
			for k := range g.Shares {
				held = append(held, &g.Shares[k])
			}
		}
		for _, l := range held {
			if l.UID != m.board.You.UID || seen[l.ID] {
				continue
			}
			seen[l.ID] = true
			left := l.ExpiresAt.Sub(m.now())
			when := words.FormatDuration(left) + " left"
			switch {
			case l.Service != nil:
				// No end while it is up: "36500d left" would say nothing.
				when = "service " + svcMark + l.Service.Name + " (" + string(m.board.ServiceState(l)) + ")"
			case left <= 0:
				when = "overdue " + words.FormatDuration(-left)
			}
			what := leaseWhat(l, &m.board)
			s := fmt.Sprintf("%s  %s  %s", l.ID, what, when)
			if u := meanUtil(n, l); u >= 0 {
				s += fmt.Sprintf("  util %d%%", u)
			}
			if idleHeld(n, l) {
				s += "  idle"
			}
			if l.Session != "" {
				s += "  tmux " + l.Session
			}
			out = append(out, " "+st.cell[kindMine].render("★")+" "+truncate(s, w-3))
		}
	}
	if len(out) == 0 {
		return nil
	}
	return append([]string{"", m.titleRule("your leases", w)}, out...)
}

// nodeFacts describes the node under the cursor: its host and how fresh
// its numbers are.
func (m detail) nodeFacts(n *api.Node, w int) []string {
	st := m.st
	const lw = 9
	var rows []string
	row := func(label, value string) {
		if value != "" {
			rows = append(rows, " "+st.label.render(padRight(label, lw))+truncate(value, w-1-lw))
		}
	}
	row("state", n.State)
	h := n.Host
	var host []string
	if h.CPUs > 0 {
		host = append(host, fmt.Sprintf("%d CPUs", h.CPUs))
	}
	if h.MemoryMiB >= 1024*1024 {
		host = append(host, fmt.Sprintf("%.1f TiB RAM", float64(h.MemoryMiB)/(1024*1024)))
	} else if h.MemoryMiB > 0 {
		host = append(host, fmt.Sprintf("%d GiB RAM", h.MemoryMiB/1024))
	}
	row("host", strings.Join(host, " · "))
	var drv []string
	if h.DriverVersion != "" {
		drv = append(drv, "driver "+h.DriverVersion)
	}
	if h.CUDAVersion != "" {
		drv = append(drv, "CUDA "+h.CUDAVersion)
	}
	if h.Backend != "" {
		drv = append(drv, "via "+string(h.Backend))
	}
	row("software", strings.Join(drv, " · "))
	if !n.TelemetryAt.IsZero() {
		row("probed", words.FormatDuration(m.now().Sub(n.TelemetryAt))+" ago")
	}
	row("pools", strings.Join(n.Host.Tags, ", "))
	if line := nodeCores(n); line == lease.CoresUnknown {
		row("cores", line)
	}
	for i, b := range n.Bookings {
		label := ""
		if i == 0 {
			label = "booked"
		}
		s := fmt.Sprintf("%s %s %s %s–%s", b.ID, holderName(&b), gpuList(b.GPUs), m.clock(b.StartedAt), lease.SpanEnd(b.StartedAt.In(m.now().Location()), b.ExpiresAt))
		switch {
		case b.Group == b.ID:
			s += " · across nodes"
		case b.Group != "":
			s += " · part of " + b.Group
		}
		if b.Note != "" {
			s += " · " + b.Note
		}
		rows = append(rows, " "+st.label.render(padRight(label, lw))+truncate(s, w-1-lw))
	}
	return append([]string{"", m.titleRule(n.Name, w)}, rows...)
}

// nodeCores is n's GPUs' local cores in one line (lease.CoresLine).
func nodeCores(n *api.Node) string {
	gpus := make([]nodeprobe.GPU, 0, len(n.GPUs))
	for _, g := range n.GPUs {
		gpus = append(gpus, g.GPU)
	}
	return lease.CoresLine(gpus)
}

// coresFact is g's local cores (and NUMA node), then the leases whose
// sessions run on them and on which: "16-31 (NUMA 1) · node01-3 alice
// 16-19".
func coresFact(n *api.Node, g *api.GPU) string {
	if g.CPUs == "" {
		return ""
	}
	s := g.CPUs
	if g.NUMANode != nil {
		s += fmt.Sprintf(" (NUMA %d)", *g.NUMANode)
	}
	gpus := make([]nodeprobe.GPU, 0, len(n.GPUs))
	var leases []lease.Lease
	seen := map[string]bool{}
	for _, x := range n.GPUs {
		gpus = append(gpus, x.GPU)
		for _, l := range append(slices.Clone(x.Shares), derefLease(x.Lease)...) {
			if !seen[l.ID] {
				seen[l.ID] = true
				leases = append(leases, l)
			}
		}
	}
	for _, u := range lease.CoreUsers(g.GPU, gpus, leases) {
		s += fmt.Sprintf(" · %s %s %s", u.Lease.ID, holderName(&u.Lease), u.CPUs)
	}
	return s
}

// derefLease is l as a list: none for nil.
func derefLease(l *lease.Lease) []lease.Lease {
	if l == nil {
		return nil
	}
	return []lease.Lease{*l}
}

func prefixed(prefix, s string) string {
	if s == "" {
		return ""
	}
	return prefix + s
}

// facts are the detail pane's sentences about one GPU.
type facts struct {
	model, memory, load string
	state               string
	lease, holder, note string
	time, session       string
	problem             string
	procs               []string
	// parts are a MIG GPU's instances or a shared GPU's budgets, one line
	// each, under partsLabel ("mig", "budgets").
	parts      []string
	partsLabel string
	// booked says who booked the GPU next, and when.
	booked string
	// cores are the GPU's local cores and the leases whose sessions run
	// on them; empty when the node does not report them (nodeFacts says
	// so).
	cores string
	// node and gpu are what the facts describe, for the charts.
	node *api.Node
	gpu  *api.GPU
}

func (m detail) facts(n *api.Node, g *api.GPU) facts {
	f := facts{node: n, gpu: g}
	now := m.now()
	f.model = shortModel(g.Model)
	if g.MIG == nodeprobe.MIGEnabled {
		f.model += fmt.Sprintf(" (MIG, %d slices)", len(g.MIGDevices))
	}
	alive := n.State == api.NodeAlive
	if g.MemoryTotalMiB > 0 {
		f.memory = fmt.Sprintf("%s / %s GiB (%d%%)", gib(g.MemoryUsedMiB), gib(g.MemoryTotalMiB), g.MemoryUsedMiB*100/g.MemoryTotalMiB)
	}
	var load []string
	if g.UtilizationPct != nil {
		load = append(load, fmt.Sprintf("util %d%%", *g.UtilizationPct))
	} else if g.Error == "" {
		// NVML reports none in MIG mode: not a number, and not zero.
		load = append(load, "util not reported")
	}
	if g.TemperatureC != nil {
		load = append(load, fmt.Sprintf("%d°C", *g.TemperatureC))
	}
	if g.PowerDrawW != nil {
		pw := fmt.Sprintf("%.0f W", *g.PowerDrawW)
		if g.PowerLimitW != nil {
			pw = fmt.Sprintf("%.0f/%.0f W", *g.PowerDrawW, *g.PowerLimitW)
		}
		load = append(load, pw)
	}
	f.load = strings.Join(load, " · ")
	if !alive {
		ago := ""
		if !n.TelemetryAt.IsZero() {
			ago = ", last heard " + words.FormatDuration(now.Sub(n.TelemetryAt)) + " ago"
		}
		f.state = fmt.Sprintf("%s%s — GPUs unknown, not free", n.State, ago)
		f.memory, f.load = "", ""
		if g.Lease != nil {
			f.state += "; lease as last known"
		}
	}
	you := m.board.You
	l := g.Lease
	if l != nil {
		f.lease = l.ID
		if l.Kind != "" && l.Kind != lease.KindInteractive {
			f.lease += " (" + string(l.Kind) + ")"
		}
		if l.Borrowed {
			f.lease += " · borrowed beyond quota: may be preempted"
		}
		f.holder = holderName(l)
		if l.UID == you.UID {
			f.holder = "★ you (" + f.holder + ")"
		} else {
			f.holder = "held by " + f.holder
		}
		if alive && f.state == "" {
			f.state = f.holder
		}
		f.note = l.Note
		left := l.ExpiresAt.Sub(now)
		if l.IsService() && l.Service != nil {
			at := ""
			if u := service.URL(l.Node, l.Service.Port); u != "" {
				at = " at " + u
			}
			f.time = fmt.Sprintf("service %s%s (%s)%s: no end while it is up", svcMark, l.Service.Name, m.board.ServiceState(l), at)
		} else if left > 0 {
			f.time = fmt.Sprintf("%s left (until %s)", words.FormatDuration(left), m.clock(l.ExpiresAt))
		} else {
			f.time = fmt.Sprintf("overdue by %s (ended %s)", words.FormatDuration(-left), m.clock(l.ExpiresAt))
		}
		f.session = l.Session
		if f.session != "" && l.UID == you.UID {
			f.session += " — a attaches"
		}
	} else if alive && g.MIG == nodeprobe.MIGEnabled {
		f.state = "split into MIG instances — claim one with --mig"
	} else if alive && len(g.Shares) > 0 {
		f.state = "shared — --mem SIZE claims a budget beside them"
	} else if alive && len(g.Processes) == 0 {
		f.state = "free — c claims it, space selects it"
	} else if alive {
		f.state = "no lease"
	}
	m.partFacts(&f, g)
	f.cores = coresFact(n, g)
	for i := range n.Bookings {
		if b := &n.Bookings[i]; b.Holds(g.Index) {
			f.booked = fmt.Sprintf("by %s %s–%s (%s): a claim ends before", holderName(b), m.clock(b.StartedAt), lease.SpanEnd(b.StartedAt.In(now.Location()), b.ExpiresAt), b.ID)
			break
		}
	}
	if alive {
		switch {
		case slices.Contains(g.Flags, lease.FlagOverBudget) && len(g.OverBudget) > 0:
			o := g.OverBudget[0]
			f.problem = fmt.Sprintf("! over budget: %s uses %s GiB of a %s GiB budget", o.User, gib(o.UsedMiB), gib(o.BudgetMiB))
		case slices.Contains(g.Flags, lease.FlagSquatted) || (l == nil && len(g.Shares) == 0 && len(g.Processes) > 0):
			f.problem = "! squatted: work runs here without the lease"
		case slices.Contains(g.Flags, lease.FlagOverdue):
			f.problem = "⧖ overdue: past its end and still held"
		case slices.Contains(g.Flags, lease.FlagIdle) && l != nil && l.Service != nil:
			// Never reclaimed for it: a service holds its GPUs while up.
			f.problem = "zz idle: its service has not used it for a while — dibs stop " + l.Service.Name + " if it is not needed"
		case slices.Contains(g.Flags, lease.FlagIdle):
			f.problem = "zz idle: held but unused for a while — release it if done"
		case slices.Contains(g.Flags, lease.FlagExpiring):
			f.problem = "⧖ ends soon: e extends it"
		}
	}
	for _, p := range g.Processes {
		who := p.User
		if who == "" {
			who = fmt.Sprintf("uid %d", p.UID)
		}
		sm := ""
		if p.SMUtilPct != nil {
			sm = fmt.Sprintf("SM %d%% ", *p.SMUtilPct)
		}
		s := fmt.Sprintf("%d %s %s GiB %s%s", p.PID, who, gib(p.UsedMemoryMiB), sm, p.Command)
		if p.Container != "" {
			s += " [" + p.Container + "]"
		}
		if p.MIGDevice != "" {
			s += " [" + migName(g, p.MIGDevice) + "]"
		}
		if squatterOf(p, g) {
			s += "  ← not the holder"
		}
		f.procs = append(f.procs, s)
	}
	// Processes without an SM figure (MIG mode; a driver or backend that
	// does not sample them) are said to have none, on the load line where
	// it takes no room of its own, rather than shown at 0 %.
	if alive && slices.ContainsFunc(g.Processes, func(p nodeprobe.Process) bool { return p.SMUtilPct == nil }) {
		f.load = strings.TrimPrefix(f.load+" · proc SM not reported", " · ")
	}
	return f
}

// idleHeld says whether a GPU l holds on n is flagged idle.
func idleHeld(n *api.Node, l *lease.Lease) bool {
	for i := range n.GPUs {
		if slices.Contains(l.GPUs, n.GPUs[i].Index) && slices.Contains(n.GPUs[i].Flags, lease.FlagIdle) {
			return true
		}
	}
	return false
}

// squatter says whether a process has no business on a GPU held by l, as
// lease.Judge decides: the uid (the name only when /proc gave no uid), or
// root's process in a container the lease adopted.
func squatter(p nodeprobe.Process, l *lease.Lease) bool {
	return l == nil || !l.Owns(p)
}

func gib(mib uint64) string {
	return fmt.Sprintf("%.1f", float64(mib)/1024)
}

// partFacts lists a MIG GPU's instances (held or free) or a shared GPU's
// budgets, and the room left for another budget.
func (m detail) partFacts(f *facts, g *api.GPU) {
	you, now := m.board.You, m.now()
	who := func(l *lease.Lease) string {
		s := holderName(l)
		if l.UID == you.UID {
			s = "★ you"
		}
		left := l.ExpiresAt.Sub(now)
		if left <= 0 {
			return s + ", overdue " + words.FormatDuration(-left)
		}
		return s + ", " + words.FormatDuration(left) + " left"
	}
	if g.MIG == nodeprobe.MIGEnabled {
		f.partsLabel = "mig"
		for _, d := range g.MIGDevices {
			s := fmt.Sprintf("%d:%d %s %s GiB · free", g.Index, d.Index, d.Profile, gib(d.MemoryTotalMiB))
			for i := range g.Shares {
				if l := &g.Shares[i]; l.MIG == d.UUID {
					s = fmt.Sprintf("%d:%d %s %s GiB · %s (%s)", g.Index, d.Index, d.Profile, gib(d.MemoryTotalMiB), l.ID, who(l))
				}
			}
			f.parts = append(f.parts, s)
		}
		return
	}
	if len(g.Shares) == 0 {
		return
	}
	f.partsLabel = "budgets"
	var held uint64
	for i := range g.Shares {
		l := &g.Shares[i]
		held += l.MemMiB
		f.parts = append(f.parts, fmt.Sprintf("%s GiB · %s (%s)", gib(l.MemMiB), l.ID, who(l)))
	}
	if g.MemoryTotalMiB > held {
		f.parts = append(f.parts, fmt.Sprintf("%s GiB of %s GiB not budgeted", gib(g.MemoryTotalMiB-held), gib(g.MemoryTotalMiB)))
	}
}

// migName names a MIG instance by its GPU:INDEX and profile.
func migName(g *api.GPU, uuid string) string {
	for _, d := range g.MIGDevices {
		if d.UUID == uuid {
			return fmt.Sprintf("%d:%d %s", g.Index, d.Index, d.Profile)
		}
	}
	return "MIG"
}

// squatterOf says whether a process has no business on g: it belongs to no
// holder of the GPU or of its part (the instance it runs on), as
// lease.Judge decides.
func squatterOf(p nodeprobe.Process, g *api.GPU) bool {
	if g.Lease != nil || len(g.Shares) == 0 {
		return squatter(p, g.Lease)
	}
	for i := range g.Shares {
		l := &g.Shares[i]
		if (p.MIGDevice == "" || l.MIG == p.MIGDevice) && !squatter(p, l) {
			return false
		}
	}
	return true
}
