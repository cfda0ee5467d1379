package doctor

import (
	"cmp"
	"maps"
	"math"
	"slices"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// DefaultWindow is how far back "have we outgrown dibs?" looks.
const DefaultWindow = 30 * 24 * time.Hour

// History is what the agents kept over the window: every node's ledger
// and samples, and the cluster now.
type History struct {
	Now    time.Time
	Window time.Duration
	// Nodes and GPUs are the cluster as it is now.
	Nodes int
	GPUs  int
	// Ledger is every node's ended leases since Now-Window; Running the
	// leases held now; Waiting the queue's entries that have not started.
	Ledger  []lease.LedgerEntry
	Running []lease.Lease
	Waiting []queue.QueueEntry
	// Buckets are each node's samples, by node.
	Buckets map[string][]Bucket
	// Tallies are nodes' ledgers as running totals (Totals) over the
	// same window, from nodes that send totals instead of their entries;
	// each node's ledger is in Ledger or in Tallies, not both.
	Tallies []Tally
	// Missing names nodes whose history could not be read: the figures
	// leave them out.
	Missing []string
}

// WeekUsers is how many people held GPUs in one week.
type WeekUsers struct {
	Week  time.Time `json:"week"`
	Users int       `json:"users"`
}

// Findings are the figures "have we outgrown dibs?" rests on.
type Findings struct {
	Since  time.Time     `json:"since"`
	Window time.Duration `json:"window_ns"`
	Nodes  int           `json:"nodes"`
	GPUs   int           `json:"gpus"`
	// Users: distinct people over the window, per week (weeks start on
	// Monday, UTC; the first and last may be partial), and the most in
	// one week.
	Users        int         `json:"users"`
	UsersPerWeek []WeekUsers `json:"users_per_week"`
	UsersMaxWeek int         `json:"users_max_week"`
	// Leases and HeldGPUHours come from the ledger (and running leases);
	// TopUser and TopUserShare name who held most.
	Leases       int     `json:"leases"`
	HeldGPUHours float64 `json:"held_gpu_hours"`
	TopUser      string  `json:"top_user,omitempty"`
	TopUserShare float64 `json:"top_user_share"`
	// From the agents' samples (see Sampled for how much of the window
	// they cover): the share of GPU-time that was busy, held but idle, free.
	Sampled          time.Duration `json:"sampled_ns"`
	Coverage         float64       `json:"coverage"`
	BusyShare        float64       `json:"busy_share"`
	HeldIdleShare    float64       `json:"held_idle_share"`
	FreeShare        float64       `json:"free_share"`
	SquattedGPUHours float64       `json:"squatted_gpu_hours"`
	SquattedShare    float64       `json:"squatted_share"`
	// WaitingShare is the share of sampled time work waited in the queue;
	// WaitingIdleShare the share of time it waited while GPUs were held
	// but idle (a lower bound: the largest of the nodes' shares), and
	// WaitingIdleGPUHours those GPUs' hours (exact, summed over nodes).
	WaitingShare        float64 `json:"waiting_share"`
	WaitingIdleShare    float64 `json:"waiting_idle_share"`
	WaitingIdleGPUHours float64 `json:"waiting_idle_gpu_hours"`
	// Queue: runs that went through the queue and their wait from submit
	// to start (work waiting now counts with its wait so far).
	Queued  int           `json:"queued"`
	WaitP50 time.Duration `json:"wait_p50_ns"`
	WaitP95 time.Duration `json:"wait_p95_ns"`
	WaitMax time.Duration `json:"wait_max_ns"`
	// Gangs: multi-node runs, their wait until every rank started, and
	// their share of the held GPU-hours.
	Gangs        int           `json:"gangs"`
	GangWaitP50  time.Duration `json:"gang_wait_p50_ns"`
	GangWaitMax  time.Duration `json:"gang_wait_max_ns"`
	GangGPUShare float64       `json:"gang_gpu_share"`
	// Preemptions by reason (quota, idle, gang); Overdue counts leases that
	// ended past their time limit.
	Preemptions map[string]int `json:"preemptions"`
	Overdue     int            `json:"overdue"`
	// Services and ServiceGPUs are the services running now (`dibs
	// serve`) and the GPUs they hold: a team whose services hold most
	// GPUs runs a serving fleet, which is what Kubernetes is for.
	Services    int `json:"services"`
	ServiceGPUs int `json:"service_gpus"`
	// Missing lists nodes left out.
	Missing []string `json:"missing,omitempty"`
}

// Analyze computes the findings over h's window.
func Analyze(h History) Findings {
	if h.Window <= 0 {
		h.Window = DefaultWindow
	}
	since := h.Now.Add(-h.Window)
	f := Findings{Since: since, Window: h.Window, Nodes: h.Nodes, GPUs: h.GPUs, Preemptions: map[string]int{}, Missing: h.Missing}

	// Leases: the ledger (entries, and the tallies of nodes that sent
	// totals) plus what runs now, each once.
	ledger := h.Ledger
	if !slices.IsSortedFunc(ledger, lease.ByEnd) {
		ledger = slices.SortedStableFunc(slices.Values(ledger), lease.ByEnd)
	}
	running := make([]string, 0, len(h.Running))
	for _, l := range h.Running {
		running = append(running, l.ID)
	}
	t := TallyLedger(ledger, since, running)
	for _, o := range h.Tallies {
		t.Add(o)
	}
	f.figures(t, h, since)

	f.sampled(h, since)
	return f
}

// weekNumber counts weeks (Monday to Sunday, UTC) from the one holding
// 1 January 1970, a Thursday: weekStart(weekNumber(t)) is the Monday of
// t's week, 00:00 UTC.
// sampled fills the figures the agents' hourly samples give: how the
// GPU-hours since were spent (busy, held idle, free, squatted), how much of
// the window the samples cover, and how long work waited while GPUs idled.
func (f *Findings) sampled(h History, since time.Time) {
	var busy, idle, free, squat, waitIdleGPU int64
	perHour := map[time.Time]*struct{ secs, waiting, waitingIdle int64 }{}
	var longest int64
	for _, node := range slices.Sorted(maps.Keys(h.Buckets)) {
		var secs int64
		for _, b := range h.Buckets[node] {
			if !b.Hour.Add(time.Hour).After(since) {
				continue
			}
			secs += b.Seconds
			busy += b.BusySec
			idle += b.IdleSec
			free += b.FreeSec
			squat += b.SquattedSec
			waitIdleGPU += b.WaitingIdleGPUSec
			p := perHour[b.Hour]
			if p == nil {
				p = &struct{ secs, waiting, waitingIdle int64 }{}
				perHour[b.Hour] = p
			}
			p.secs = max(p.secs, b.Seconds)
			p.waiting = max(p.waiting, b.WaitingSec)
			p.waitingIdle = max(p.waitingIdle, b.WaitingIdleSec)
		}
		longest = max(longest, secs)
	}
	var hourSecs, waiting, waitingIdle int64
	for _, p := range perHour {
		hourSecs += p.secs
		waiting += p.waiting
		waitingIdle += p.waitingIdle
	}
	f.Sampled = time.Duration(longest) * time.Second
	f.Coverage = min(f.Sampled.Seconds()/h.Window.Seconds(), 1)
	if total := busy + idle + free; total > 0 {
		f.BusyShare = float64(busy) / float64(total)
		f.HeldIdleShare = float64(idle) / float64(total)
		f.FreeShare = float64(free) / float64(total)
		f.SquattedShare = float64(squat) / float64(total)
	}
	f.SquattedGPUHours = float64(squat) / 3600
	f.WaitingIdleGPUHours = float64(waitIdleGPU) / 3600
	if hourSecs > 0 {
		f.WaitingShare = float64(waiting) / float64(hourSecs)
		f.WaitingIdleShare = float64(waitingIdle) / float64(hourSecs)
	}
}

func weekNumber(t time.Time) int64 {
	day := t.Unix() / 86400
	if t.Unix() < 0 && t.Unix()%86400 != 0 {
		day--
	}
	w := day + 3
	if w < 0 {
		return (w - 6) / 7
	}
	return w / 7
}

// weekStart is the Monday that starts week number w.
func weekStart(w int64) time.Time { return time.Unix((w*7-3)*86400, 0).UTC() }

// percentile is the nearest-rank p-quantile; 0 for none.
func percentile(ds []time.Duration, p float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.SortFunc(s, cmp.Compare[time.Duration])
	k := int(math.Ceil(float64(len(s))*p)) - 1
	return s[min(max(k, 0), len(s)-1)]
}
