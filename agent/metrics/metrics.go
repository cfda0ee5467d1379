// Package metrics exposes one agent to Prometheus: its GPUs (with the
// labels NVIDIA's DCGM exporter uses, so dashboards translate), who holds
// each GPU and how, the queue entries submitted here, how long the local
// API takes, and the gossip cluster as this agent sees it.
//
// Everything node-specific is exported by the node's own agent only (its
// GPUs, its leases, the queue entries whose source of truth it is), so
// scraping every agent and summing gives the cluster with nothing counted
// twice. The collector reads the agent's published state when Prometheus
// scrapes: no goroutine of its own, no copy kept up to date. The only
// state it keeps is what cannot be read later: the two histograms, fed by
// hooks (ObserveRequest from the socket front door, QueueChanged from the
// queue's origin). Nothing is registered globally: each agent has its own
// registry.
package metrics

import (
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/dibs-gpu/dibs/agent/proxy"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/runrecord"
)

// Source is what the collector reads at scrape time; core.Service is one.
// Both methods are called from the scraping goroutine and must not block
// on a writer (the service's are lock-free reads of published state).
type Source interface {
	// View is the cluster as the agent sees it now; its Local node holds
	// this node's snapshot, leases, judgements and queue entries.
	View() queue.ClusterView
	// Status is the agent's own summary: version, backend, start time,
	// gossip members and counters.
	Status() api.Status
	// RunningFigures is a running lease of this node's figures so far
	// (mean and peak SM, idle share, peak memory).
	RunningFigures(id string) (runrecord.Figures, bool)
}

// GPU states of dibs_gpu_lease: exactly one per GPU.
const (
	StateFree       = "free"       // no lease, no process, readable
	StateHeld       = "held"       // leased
	StateReserved   = "reserved"   // a gang reservation not yet committed
	StateOverdue    = "overdue"    // leased, past its end (end action warn, or in its grace)
	StatePreempting = "preempting" // leased, told to stop (quota or idle reclaim)
	StateUnleased   = "unleased"   // no lease but processes run: user is their owner
	StateDown       = "down"       // the probe cannot read it
)

// Metrics is one agent's metrics: its registry, the collector over its
// state and the two histograms its hooks feed.
type Metrics struct {
	src Source
	now func() time.Time
	reg *prometheus.Registry

	apiDuration   *prometheus.HistogramVec
	queueWait     prometheus.Histogram
	serviceHealth *prometheus.HistogramVec

	// proxy reads the services proxy's counts (SetProxy); nil when the
	// proxy is off.
	proxy atomic.Pointer[func() []proxy.Count]

	mu sync.Mutex
	// running are the keys (id#attempt) of this origin's entries last seen
	// running, so each start is observed once.
	running map[string]bool
}

// New builds the metrics over src. now is the agent's clock. The queue
// entries already running are taken as seen, so a restarted agent does
// not observe old starts again.
func New(src Source, now func() time.Time) *Metrics {
	if now == nil {
		now = time.Now
	}
	m := &Metrics{src: src, now: now, reg: prometheus.NewRegistry(), running: map[string]bool{}}
	m.apiDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "dibs_api_request_duration_seconds",
		Help: "Time to answer a request on the local API socket (claim, release, queue/submit, ...), by endpoint and HTTP status; the watch stream is not timed.",
		// A claim is a few ms (an fsync); a claim on another node adds a
		// gossip round trip; a refusal is sub-millisecond.
		Buckets: []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10},
	}, []string{"endpoint", "code"})
	m.queueWait = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "dibs_queue_wait_seconds",
		Help:    "Time from submitting a queued request at this node to its start (restarts of a requeued one are not counted: they have no submit time of their own).",
		Buckets: []float64{1, 10, 30, 60, 300, 900, 1800, 3600, 2 * 3600, 4 * 3600, 8 * 3600, 24 * 3600, 3 * 24 * 3600},
	})
	m.serviceHealth = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "dibs_service_health_seconds",
		Help: "Time one health check of a service of this node took (the TCP connect, the HTTP answer on --health, the --health-cmd), passed or failed; a check that gets no answer counts up to its 5 s bound.",
		// A local connect is tens of µs, an HTTP answer under a
		// millisecond from an idle server, more from a busy one; a
		// --health-cmd starts a shell as the owner (milliseconds).
		Buckets: []float64{.0001, .00025, .0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5},
	}, []string{"node", "service", "user"})
	m.reg.MustRegister(m.apiDuration, m.queueWait, m.serviceHealth, &collector{m: m},
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	v := src.View()
	if l := v.Local(); l != nil {
		for i := range l.Queue {
			if e := &l.Queue[i]; e.Running {
				m.running[e.Key()] = true
			}
		}
	}
	return m
}

// SetProxy makes the services proxy's connection counts part of every
// scrape (dibs_proxy_connections_total). counts is called on the
// scraping goroutine and must not block.
func (m *Metrics) SetProxy(counts func() []proxy.Count) { m.proxy.Store(&counts) }

// Registry is where the agent's metrics are registered (tests gather it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the registry in Prometheus' text format (or OpenMetrics
// when asked), with promhttp's own request counters.
func (m *Metrics) Handler(log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return promhttp.InstrumentMetricHandler(m.reg, promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{
		ErrorLog:            slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		ErrorHandling:       promhttp.ContinueOnError,
		MaxRequestsInFlight: 4,
		Timeout:             10 * time.Second,
	}))
}

// ObserveRequest implements sockapi.Observer: one answered request on the
// local API. Called on the request's goroutine; it does not block.
func (m *Metrics) ObserveRequest(endpoint string, code int, d time.Duration) {
	m.apiDuration.WithLabelValues(endpoint, strconv.Itoa(code)).Observe(d.Seconds())
}

// ObserveHealthCheck is one health check of user's service on node that
// took d, passed or failed. Called on the service's supervisor; it does
// not block.
func (m *Metrics) ObserveHealthCheck(node, service, user string, d time.Duration) {
	m.serviceHealth.WithLabelValues(node, service, user).Observe(d.Seconds())
}

// QueueChanged is called with the origin's entries after every change to
// them: an entry seen running for the first time has just started, and its
// wait since submission is observed (first attempts only: a requeued
// entry keeps its first submit time). Safe to call from any goroutine.
func (m *Metrics) QueueChanged(entries []queue.QueueEntry) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	still := make(map[string]bool, len(m.running))
	for i := range entries {
		e := &entries[i]
		if !e.Running {
			continue
		}
		k := e.Key()
		still[k] = true
		if !m.running[k] && e.Attempt == 0 {
			m.queueWait.Observe(max(now.Sub(e.SubmittedAt), 0).Seconds())
		}
	}
	m.running = still
}
