package tui

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"
	"github.com/charmbracelet/x/ansi"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
)

// fixedNow is the clock of every test: golden files must not move.
var fixedNow = time.Date(2026, 3, 10, 16, 0, 0, 0, time.UTC)

func nowFunc() time.Time { return fixedNow }

const (
	uidAlice = 1001
	uidBob   = 1002
	uidCarol = 1003
	uidDave  = 1004
	uidErin  = 1005
)

func gpu(model string, idx int, util, memUsed, memTotal int) api.GPU {
	return api.GPU{GPU: nodeprobe.GPU{
		Index:          idx,
		UUID:           fmt.Sprintf("GPU-%04d", idx),
		Model:          model,
		MemoryTotalMiB: uint64(memTotal),
		MemoryUsedMiB:  uint64(memUsed),
		UtilizationPct: nodeprobe.IntPtr(util),
		TemperatureC:   nodeprobe.IntPtr(30 + util/2),
		PowerDrawW:     nodeprobe.FloatPtr(float64(70 + util*6)),
		PowerLimitW:    nodeprobe.FloatPtr(700),
		Processes:      []nodeprobe.Process{},
	}}
}

// setUtil sets a GPU's load and the temperature and power that go with it.
func setUtil(g *api.GPU, util int) {
	*g.UtilizationPct = util
	*g.TemperatureC = 30 + util/2
	*g.PowerDrawW = float64(70 + util*6)
}

func host(name string, cpus int, memGiB uint64) nodeprobe.Host {
	return nodeprobe.Host{Name: name, CPUs: cpus, MemoryMiB: memGiB * 1024, DriverVersion: "570.124.06", CUDAVersion: "12.8", Backend: nodeprobe.BackendNVML}
}

func mkLease(id, node, user string, uid int, gpus []int, left time.Duration) *lease.Lease {
	return &lease.Lease{
		ID: id, Node: node, GPUs: gpus, User: user, UID: uid, Kind: lease.KindInteractive,
		StartedAt: fixedNow.Add(-2 * time.Hour), ExpiresAt: fixedNow.Add(left),
	}
}

func proc(pid int, user string, uid int, cmd string, mem int) nodeprobe.Process {
	return nodeprobe.Process{PID: pid, User: user, UID: uid, Command: cmd, UsedMemoryMiB: uint64(mem)}
}

// testBoard is the fixed cluster of the golden files: 4 nodes (8, 8, 4, 4
// GPUs) with every kind of cell: free, mine, theirs, idle, squatted,
// overdue, and a dead node.
func testBoard() api.Board {
	const h100 = "NVIDIA H100 80GB HBM3"
	const a100 = "NVIDIA A100-SXM4-40GB"
	n1 := api.Node{Name: "node01", State: api.NodeAlive, Host: host("node01", 224, 2048), TelemetryAt: fixedNow.Add(-2 * time.Second)}
	for i := range 8 {
		g := gpu(h100, i, 0, 0, 81559)
		// Two sockets: GPUs 0-3 on the first, 4-7 on the second.
		g.CPUs, g.NUMANode = "0-55,112-167", nodeprobe.IntPtr(0)
		if i >= 4 {
			g.CPUs, g.NUMANode = "56-111,168-223", nodeprobe.IntPtr(1)
		}
		n1.GPUs = append(n1.GPUs, g)
	}
	mine := mkLease("node01-42", "node01", "alice", uidAlice, []int{1, 2}, 2*time.Hour+40*time.Minute)
	mine.Session, mine.Note = "dibs-node01-42", "llama sweep"
	mine.CPUs = []string{"0-7", "8-15"} // --cpus-per-gpu 8
	for _, i := range []int{1, 2} {
		g := &n1.GPUs[i]
		g.Lease = mine
		setUtil(g, 97-i)
		g.MemoryUsedMiB = uint64(61234 + i*1000)
		g.Processes = []nodeprobe.Process{proc(4100+i, "alice", uidAlice, "python train.py --cfg sweep.yaml", 60000)}
	}
	bob := mkLease("node01-43", "node01", "bob", uidBob, []int{3}, 3*time.Hour)
	n1.GPUs[3].Lease = bob
	setUtil(&n1.GPUs[3], 85)
	n1.GPUs[3].MemoryUsedMiB = 40960
	n1.GPUs[3].Processes = []nodeprobe.Process{proc(5200, "bob", uidBob, "torchrun eval.py", 40000)}
	carol := mkLease("node01-44", "node01", "carol", uidCarol, []int{4}, time.Hour)
	carol.Note = "notebook"
	n1.GPUs[4].Lease = carol
	n1.GPUs[4].Flags = []lease.Flag{lease.FlagIdle}
	n1.GPUs[4].MemoryUsedMiB = 2048
	n1.GPUs[5].Flags = []lease.Flag{lease.FlagSquatted}
	setUtil(&n1.GPUs[5], 41)
	n1.GPUs[5].MemoryUsedMiB = 20480
	n1.GPUs[5].Processes = []nodeprobe.Process{proc(6300, "dave", uidDave, "python hack.py", 20000)}
	over := mkLease("node01-40", "node01", "bob", uidBob, []int{6}, -12*time.Minute)
	over.Session = "dibs-node01-40"
	n1.GPUs[6].Lease = over
	n1.GPUs[6].Flags = []lease.Flag{lease.FlagOverdue}
	setUtil(&n1.GPUs[6], 12)
	n1.GPUs[6].MemoryUsedMiB = 30000
	n1.GPUs[6].Processes = []nodeprobe.Process{proc(5300, "bob", uidBob, "python finetune.py", 29000)}

	n2 := api.Node{Name: "node02", State: api.NodeAlive, Host: host("node02", 224, 2048), TelemetryAt: fixedNow.Add(-3 * time.Second)}
	erin := mkLease("node02-7", "node02", "erin", uidErin, []int{4, 5, 6, 7}, 20*time.Hour)
	erin.Kind = lease.KindBatch
	for i := range 8 {
		g := gpu(h100, i, 0, 0, 81559)
		if i >= 4 {
			g.Lease = erin
			setUtil(&g, 55+i*5)
			g.MemoryUsedMiB = 70000
			g.Processes = []nodeprobe.Process{proc(7000+i, "erin", uidErin, "torchrun --nproc-per-node 4 pretrain.py", 69000)}
		}
		n2.GPUs = append(n2.GPUs, g)
	}

	n3 := api.Node{Name: "node03", State: api.NodeAlive, Host: host("node03", 64, 512), TelemetryAt: fixedNow.Add(-1 * time.Second)}
	for i := range 4 {
		n3.GPUs = append(n3.GPUs, gpu(a100, i, 0, 0, 40960))
	}
	n3.GPUs[2].Lease = mkLease("node03-3", "node03", "bob", uidBob, []int{2}, 45*time.Minute)
	setUtil(&n3.GPUs[2], 33)
	n3.GPUs[2].MemoryUsedMiB = 12000
	n3.GPUs[2].Processes = []nodeprobe.Process{proc(8100, "bob", uidBob, "jupyter-lab", 11000)}

	n4 := api.Node{Name: "node04", State: api.NodeDead, Host: host("node04", 64, 512), TelemetryAt: fixedNow.Add(-7 * time.Minute)}
	for i := range 4 {
		g := gpu(a100, i, 0, 0, 40960)
		g.Flags = []lease.Flag{api.FlagUnknown}
		n4.GPUs = append(n4.GPUs, g)
	}
	n4.GPUs[0].Lease = mkLease("node04-9", "node04", "carol", uidCarol, []int{0}, 5*time.Hour)

	return api.Board{
		Self:        "node01",
		You:         lease.Caller{UID: uidAlice, User: "alice"},
		GeneratedAt: fixedNow,
		Nodes:       []api.Node{n1, n2, n3, n4},
	}
}

// bigBoard is a cluster of nodes × gpus, a quarter of them held.
func bigBoard(nodes, gpus int) api.Board {
	b := api.Board{Self: "gpu001", You: lease.Caller{UID: uidAlice, User: "alice"}, GeneratedAt: fixedNow}
	users := []string{"alice", "bob", "carol", "dave", "erin"}
	for n := range nodes {
		node := api.Node{Name: fmt.Sprintf("gpu%03d", n+1), State: api.NodeAlive, TelemetryAt: fixedNow}
		if n%11 == 10 {
			node.State = api.NodeSuspect
		}
		for i := range gpus {
			g := gpu("NVIDIA H200", i, (n*7+i*13)%100, 0, 143771)
			if (n+i)%4 == 0 {
				u := (n + i) % len(users)
				g.Lease = mkLease(fmt.Sprintf("%s-%d", node.Name, i), node.Name, users[u], uidAlice+u, []int{i}, time.Duration(n+1)*time.Hour)
				g.Processes = []nodeprobe.Process{proc(1000+i, users[u], uidAlice+u, "python train.py", 50000)}
				g.MemoryUsedMiB = 50000
			}
			node.GPUs = append(node.GPUs, g)
		}
		b.Nodes = append(b.Nodes, node)
	}
	return b
}

// fakeBackend records what the board asked and answers from its fields.
type fakeBackend struct {
	mu       sync.Mutex
	board    api.Board
	err      error // returned by every call when set
	claims   []api.ClaimRequest
	releases []api.ReleaseRequest
	extends  []api.ExtendRequest
	attaches []string
	watch    chan api.Board
	watchErr error
	queue    api.Queue
	usage    api.UsageReport
	events   api.EventList
	cancels  []string
	// claimed, when set, adjusts every claim's answer (a borrow, a cut).
	claimed func(*api.ClaimResponse)
}

var _ Backend = (*fakeBackend)(nil)

func (f *fakeBackend) Board(context.Context) (api.Board, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.board, f.err
}

func (f *fakeBackend) Watch(ctx context.Context) (<-chan api.Board, func() error) {
	f.mu.Lock()
	ch := f.watch
	f.mu.Unlock()
	return ch, func() error {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.watchErr
	}
}

func (f *fakeBackend) Claim(_ context.Context, req api.ClaimRequest) (api.ClaimResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.claims = append(f.claims, req)
	if f.err != nil {
		return api.ClaimResponse{}, f.err
	}
	gpus := req.GPUs
	if len(gpus) == 0 {
		for i := range req.Count {
			gpus = append(gpus, i+6)
		}
	}
	r := api.ClaimResponse{ID: req.Node + "-50", Node: req.Node, GPUs: gpus, CUDAVisibleDevices: joinInts(gpus), Token: 50, ExpiresAt: fixedNow.Add(2*time.Hour + 40*time.Minute)}
	if req.Run != nil {
		r.Session = "dibs-" + r.ID
	}
	if f.claimed != nil {
		f.claimed(&r)
	}
	return r, nil
}

func (f *fakeBackend) Release(_ context.Context, req api.ReleaseRequest) (api.ReleaseResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.releases = append(f.releases, req)
	return api.ReleaseResponse{Released: req.IDs}, f.err
}

func (f *fakeBackend) Extend(_ context.Context, req api.ExtendRequest) (api.ClaimResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.extends = append(f.extends, req)
	return api.ClaimResponse{ID: req.ID, ExpiresAt: fixedNow.Add(6*time.Hour + 40*time.Minute)}, f.err
}

func (f *fakeBackend) Attach(_ context.Context, id string) (api.AttachResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.attaches = append(f.attaches, id)
	if f.err != nil {
		return api.AttachResponse{}, f.err
	}
	return api.AttachResponse{
		Lease:   lease.Lease{ID: id, Session: "dibs-" + id},
		Local:   true,
		Command: []string{"tmux", "attach-session", "-t", "=dibs-" + id},
	}, nil
}

func (f *fakeBackend) Queue(context.Context) (api.Queue, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.queue, f.err
}

func (f *fakeBackend) Cancel(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.cancels = append(f.cancels, id)
	return f.err
}

func (f *fakeBackend) Usage(context.Context, string) (api.UsageReport, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.usage, f.err
}

func (f *fakeBackend) Events(_ context.Context, req api.EventsRequest) (api.EventList, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if req.User == "" {
		return f.events, f.err
	}
	out := api.EventList{Events: []event.Event{}}
	for _, e := range f.events.Events {
		if e.User == req.User || e.By == req.User {
			out.Events = append(out.Events, e)
		}
	}
	return out, f.err
}

// harness drives a Model the way bubbletea does, but synchronously.
type harness struct {
	t    *testing.T
	m    *Model
	be   *fakeBackend
	quit bool
	msgs []tea.Msg // every message a command produced
}

func newHarness(t *testing.T, w, h int, opts Options) *harness {
	t.Helper()
	be := &fakeBackend{board: testBoard(), queue: testQueue(), usage: testUsage(), events: testEvents()}
	if opts.Backend == nil {
		opts.Backend = be
	}
	if opts.Now == nil {
		opts.Now = nowFunc
	}
	hs := &harness{t: t, m: New(opts), be: be}
	t.Cleanup(hs.m.cancel)
	hs.send(tea.WindowSizeMsg{Width: w, Height: h})
	hs.send(BoardMsg(testBoard()))
	return hs
}

// send delivers msg and runs the commands it returns, feeding their
// messages back, as the program's loop would. Commands that wait (ticks,
// streams) are not run.
func (h *harness) send(msg tea.Msg) {
	h.t.Helper()
	_, cmd := h.m.Update(msg)
	h.run(cmd)
}

func (h *harness) run(cmd tea.Cmd) {
	h.t.Helper()
	if cmd == nil {
		return
	}
	done := make(chan tea.Msg, 1)
	go func() { done <- cmd() }()
	var msg tea.Msg
	select {
	case msg = <-done:
	case <-time.After(200 * time.Millisecond):
		return // a tick or a stream read: the loop would wait; tests do not
	}
	h.msgs = append(h.msgs, msg)
	switch msg := msg.(type) {
	case nil:
	case tea.QuitMsg:
		h.quit = true
	case tea.BatchMsg:
		for _, c := range msg {
			h.run(c)
		}
	default:
		h.send(msg)
	}
}

func (h *harness) keys(keys ...string) {
	h.t.Helper()
	for _, k := range keys {
		h.send(press(k))
	}
}

func (h *harness) typeText(s string) {
	h.t.Helper()
	for _, r := range s {
		h.send(tea.KeyPressMsg{Code: r, Text: string(r)})
	}
}

// screen is the frame as a person reads it: no escape codes, no trailing blanks.
func (h *harness) screen() string {
	return plainView(h.m)
}

func plainView(m *Model) string {
	return plainString(m.View().Content)
}

func plainString(s string) string {
	lines := strings.Split(ansi.Strip(s), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimRight(l, " ")
	}
	return strings.Join(lines, "\n")
}

func press(k string) tea.KeyPressMsg {
	switch k {
	case "up":
		return tea.KeyPressMsg{Code: tea.KeyUp}
	case "down":
		return tea.KeyPressMsg{Code: tea.KeyDown}
	case "left":
		return tea.KeyPressMsg{Code: tea.KeyLeft}
	case "right":
		return tea.KeyPressMsg{Code: tea.KeyRight}
	case "enter":
		return tea.KeyPressMsg{Code: tea.KeyEnter}
	case "esc":
		return tea.KeyPressMsg{Code: tea.KeyEscape}
	case "tab":
		return tea.KeyPressMsg{Code: tea.KeyTab}
	case "shift+tab":
		return tea.KeyPressMsg{Code: tea.KeyTab, Mod: tea.ModShift}
	case "space":
		return tea.KeyPressMsg{Code: tea.KeySpace, Text: " "}
	case "backspace":
		return tea.KeyPressMsg{Code: tea.KeyBackspace}
	case "ctrl+c":
		return tea.KeyPressMsg{Code: 'c', Mod: tea.ModCtrl}
	case "ctrl+u":
		return tea.KeyPressMsg{Code: 'u', Mod: tea.ModCtrl}
	}
	r := []rune(k)
	if len(r) != 1 {
		panic("press: unknown key " + k)
	}
	return tea.KeyPressMsg{Code: r[0], Text: k}
}

// cursor returns the node name and GPU index under the cursor.
func (h *harness) cursor() (string, int) {
	n, g := h.m.grid.cursorGPU()
	if n == nil || g == nil {
		return "", -1
	}
	return n.Name, g.Index
}

func (h *harness) moveTo(node string, gpu int) {
	h.t.Helper()
	for i := 0; i < 40; i++ {
		if n, _ := h.cursor(); n == node {
			break
		}
		h.keys("j")
	}
	h.keys(slices.Repeat([]string{"h"}, 16)...)
	// A split GPU takes a cell per MIG instance: step to the GPU's first.
	for i := 0; i < 40; i++ {
		if _, g := h.cursor(); g >= gpu {
			break
		}
		h.keys("l")
	}
	if n, g := h.cursor(); n != node || g != gpu {
		h.t.Fatalf("cursor at %s/%d, want %s/%d", n, g, node, gpu)
	}
}

var errAgent = &api.Error{Status: 409, Code: string(refusal.CodeConflict), Msg: "GPU 3 on node01 is held by bob until 19:00: pick free GPUs or queue with --wait"}

// testQueue is the queue of the golden files: one request next to start,
// a gang behind it, one whose origin is down, one running.
func testQueue() api.Queue {
	return api.Queue{Scheduler: "node01", Entries: []api.QueuedEntry{
		{ID: "node01-q3", Position: 1, User: "alice", Nodes: 1, GPUsPerNode: 2, Kind: "batch", Duration: "4h", Priority: 912,
			SubmittedAt: fixedNow.Add(-20 * time.Minute), EstStart: fixedNow.Add(40 * time.Minute),
			Waiting: "next to start: 2 GPUs on node01 when carol's node01-44 ends", Command: []string{"python", "eval.py"}},
		{ID: "node02-q1", Position: 2, User: "bob", Nodes: 2, GPUsPerNode: 4, Kind: "batch", Duration: "24h", Priority: 640,
			SubmittedAt: fixedNow.Add(-2 * time.Hour), EstStart: fixedNow.Add(3 * time.Hour),
			Waiting: "waiting behind higher-priority requests"},
		{ID: "node04-q2", Position: 3, User: "carol", Nodes: 1, GPUsPerNode: 1, Kind: "interactive", Duration: "2h",
			SubmittedAt: fixedNow.Add(-30 * time.Minute), Waiting: "its origin node04 is down: it waits until node04 is back"},
		{ID: "node01-q1", User: "erin", Nodes: 1, GPUsPerNode: 4, Kind: "batch", Duration: "24h", Running: true,
			SubmittedAt: fixedNow.Add(-5 * time.Hour)},
	}}
}

// testUsage is the usage of the golden files.
func testUsage() api.UsageReport {
	return api.UsageReport{Since: fixedNow.Add(-7 * 24 * time.Hour), Users: []api.UserUsage{
		{User: "erin", GPUHours: 96, Decayed: 81.5, Share: 1, FairShare: 0.12, RunningGPU: 4, Running: 4, Quota: 8},
		{User: "bob", GPUHours: 40.2, Decayed: 30.1, Share: 1, FairShare: 0.45, RunningGPU: 3, Running: 3},
		{User: "alice", GPUHours: 12.5, Decayed: 10.2, Share: 2, FairShare: 0.87, RunningGPU: 2, Running: 2, Quota: 8},
		{User: "carol", GPUHours: 3.1, Decayed: 1.4, Share: 1, FairShare: 0.95, RunningGPU: 1, Running: 0.43},
	}}
}

// testEvents is the day's events of the golden files.
func testEvents() api.EventList {
	l := *mkLease("node01-42", "node01", "alice", uidAlice, []int{1, 2}, 2*time.Hour+40*time.Minute)
	l.Session = "dibs-node01-42"
	bob := *mkLease("node01-43", "node01", "bob", uidBob, []int{3}, 3*time.Hour)
	old := *mkLease("node01-39", "node01", "bob", uidBob, []int{6}, -time.Hour)
	q := queue.QueueEntry{ID: "node01-q3", Origin: "node01", User: "alice", Nodes: 1, GPUsPerNode: 2}
	evs := []event.Event{
		event.AgentEvent(event.EventAgentLeave, "node01", "node04", "is dead: its GPUs show as unknown", fixedNow.Add(-7*time.Minute)),
		event.LeaseEvent(event.EventClaim, l, fixedNow.Add(-2*time.Hour)),
		event.LeaseEvent(event.EventClaim, bob, fixedNow.Add(-90*time.Minute)),
		event.EndEvent(old, lease.EndExpired, "", fixedNow.Add(-60*time.Minute)),
		event.SquatterEvent("node01", 5, "dave", 6300, "python hack.py", nil, fixedNow.Add(-45*time.Minute)),
		event.EntryEvent(event.EventSubmit, q, "", fixedNow.Add(-20*time.Minute)),
		event.WarnEvent(bob, "10m", fixedNow.Add(-12*time.Minute)),
		event.LeaseEvent(event.EventExtend, bob, fixedNow.Add(-10*time.Minute)),
	}
	event.SortEvents(evs)
	for i := range evs {
		evs[i].Seq = uint64(i + 1)
	}
	return api.EventList{Events: evs}
}

// mineIdleBoard is testBoard with an idle GPU of alice's on node03: her
// own idle GPU must still show as hers.
func mineIdleBoard() api.Board {
	b := testBoard()
	g := &b.Nodes[2].GPUs[0]
	g.Lease = mkLease("node03-5", "node03", "alice", uidAlice, []int{0}, 50*time.Minute)
	g.Lease.Note = "notebook"
	g.Flags = []lease.Flag{lease.FlagIdle}
	return b
}
