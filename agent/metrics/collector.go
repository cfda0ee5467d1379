package metrics

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

// gpuLabels are dcgm-exporter's labels (gpu, UUID, pci_bus_id, device,
// modelName, Hostname), plus node, the dibs node name, which the lease
// metrics carry too so the two join.
var gpuLabels = []string{"node", "gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname"}

func desc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(name, help, labels, nil)
}

// The metrics read at scrape time. docs/operations.md lists them with their
// DCGM counterparts.
var (
	descGPUUtil      = desc("dibs_gpu_utilization_percent", "GPU utilisation over the last sample period, 0-100 (DCGM_FI_DEV_GPU_UTIL).", gpuLabels...)
	descGPUMemUsed   = desc("dibs_gpu_memory_used_bytes", "GPU memory in use (DCGM_FI_DEV_FB_USED, which is in MiB).", gpuLabels...)
	descGPUMemTotal  = desc("dibs_gpu_memory_total_bytes", "GPU memory in all (DCGM_FI_DEV_FB_USED + DCGM_FI_DEV_FB_FREE + DCGM_FI_DEV_FB_RESERVED, in MiB there).", gpuLabels...)
	descGPUTemp      = desc("dibs_gpu_temperature_celsius", "GPU temperature (DCGM_FI_DEV_GPU_TEMP).", gpuLabels...)
	descGPUPower     = desc("dibs_gpu_power_watts", "GPU power draw (DCGM_FI_DEV_POWER_USAGE).", gpuLabels...)
	descGPUPowerCap  = desc("dibs_gpu_power_limit_watts", "GPU power limit (DCGM_FI_DEV_POWER_MGMT_LIMIT).", gpuLabels...)
	descGPUProcs     = desc("dibs_gpu_processes", "Processes running on the GPU.", gpuLabels...)
	descGPUUp        = desc("dibs_gpu_up", "1 when the probe read the GPU, 0 when it could not (the board shows it down).", gpuLabels...)
	descProbeTime    = desc("dibs_probe_timestamp_seconds", "When the GPU numbers above were read (the agent probes every --probe-interval; a scrape does not probe).", "node")
	descLease        = desc("dibs_gpu_lease", "Who holds each GPU and how: 1 for the GPU's one state (free, held, reserved, overdue, preempting, unleased, down); user is the holder, or the owner of the processes of an unleased GPU.", "node", "gpu", "user", "state")
	descLeaseLeft    = desc("dibs_gpu_lease_remaining_seconds", "Time left on the lease holding the GPU; negative once past its end.", "node", "gpu", "user")
	descSquatted     = desc("dibs_gpu_squatted", "1 when a process runs on the GPU without a lease, or belongs to someone other than the holder.", "node", "gpu")
	descIdle         = desc("dibs_gpu_idle", "1 when the GPU is leased but has had no process and low utilisation for the node's idle_after.", "node", "gpu")
	descQueue        = desc("dibs_queue_entries", "Queued requests submitted at this node (their source of truth), waiting or running; sum over every agent for the cluster's queue.", "state")
	descQueueOldest  = desc("dibs_queue_oldest_wait_seconds", "How long the oldest request submitted here has been waiting; 0 when none waits.")
	descMembers      = desc("dibs_cluster_members", "Cluster members as this agent sees them, by state (alive, suspect, dead, left); absent on a single node.", "state")
	descMemberHeard  = desc("dibs_cluster_member_last_heard_timestamp_seconds", "When this agent last heard from each other member (a probe answered or news of its state).", "member")
	descGossipMsgs   = desc("dibs_gossip_messages_total", "Gossip messages this agent received (in) and sent (out).", "direction")
	descGossipBytes  = desc("dibs_gossip_bytes_total", "Gossip bytes this agent received (in) and sent (out).", "direction")
	descGossipDrop   = desc("dibs_gossip_dropped_total", "Gossip messages dropped: stale, malformed or over a limit.")
	descGossipCrypt  = desc("dibs_gossip_decrypt_failures_total", "Gossip packets that failed to decrypt: a node with another cluster key, or someone probing the port.")
	descGossipReqs   = desc("dibs_gossip_remote_requests_total", "Requests this agent sent to other agents (claims, releases, starts on their nodes).")
	descGossipReqErr = desc("dibs_gossip_remote_request_errors_total", "Requests to other agents that got no answer.")
	descGossipRefuse = desc("dibs_gossip_streams_refused_total", "Inbound gossip TCP streams closed unread: over the caps per address or in all, or silent too long.")
	descServiceUp    = desc("dibs_service_up", "1 while a service of this node passes its check (healthy), 0 otherwise (starting, unhealthy, restarting).", "node", "service", "user", "state")
	descServiceRest  = desc("dibs_service_restarts_total", "Restarts in place of a service of this node since it started.", "node", "service", "user")
	descProxyConns   = desc("dibs_proxy_connections_total", "Connections to a service's port on this node's proxy, by outcome: forwarded to a healthy replica, refused (over proxy_max_conns or proxy_max_per_service), failed (no healthy replica answered, or none passed the owner check).", "node", "service", "user", "port", "outcome")
	descLeaseSM      = desc("dibs_lease_sm_mean_percent", "A running lease's mean SM utilization so far over its GPUs, 0-100; absent where the hardware reports none (MIG, budgets).", "node", "lease", "user")
	descLeaseIdle    = desc("dibs_lease_idle_percent", "Share of a running lease's time so far during which every GPU it holds read 0 %.", "node", "lease", "user")
	descLeasePeakMem = desc("dibs_lease_peak_memory_bytes", "The most GPU memory a running lease has used on one of its GPUs so far.", "node", "lease", "user")
	descInfo         = desc("dibs_agent_info", "The agent: its node, version and GPU backend; always 1.", "node", "version", "backend")
	descStart        = desc("dibs_agent_start_time_seconds", "When the agent started.")
)

var allDescs = []*prometheus.Desc{
	descGPUUtil, descGPUMemUsed, descGPUMemTotal, descGPUTemp, descGPUPower, descGPUPowerCap, descGPUProcs, descGPUUp,
	descProbeTime, descLease, descLeaseLeft, descSquatted, descIdle, descQueue, descQueueOldest, descMembers,
	descMemberHeard, descGossipMsgs, descGossipBytes, descGossipDrop, descGossipCrypt, descGossipReqs,
	descGossipReqErr, descGossipRefuse, descInfo, descStart, descLeaseSM, descLeaseIdle, descLeasePeakMem, descServiceUp, descServiceRest,
	descProxyConns,
}

// collector turns the agent's state into metrics at scrape time.
type collector struct{ m *Metrics }

var _ prometheus.Collector = (*collector)(nil)

// Describe implements prometheus.Collector.
func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range allDescs {
		ch <- d
	}
}

// Collect implements prometheus.Collector. It may run on several scrapes'
// goroutines at once: it only reads.
func (c *collector) Collect(ch chan<- prometheus.Metric) {
	v := c.m.src.View()
	st := c.m.src.Status()
	gauge := func(d *prometheus.Desc, val float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, val, labels...)
	}
	counter := func(d *prometheus.Desc, val uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(val), labels...)
	}
	gauge(descInfo, 1, v.Self, st.Version, st.Backend)
	if !st.StartedAt.IsZero() {
		gauge(descStart, float64(st.StartedAt.UnixNano())/1e9)
	}
	if n := v.Local(); n != nil {
		c.gpus(n, gauge)
		c.leases(n, v, gauge)
		c.efficiency(n, gauge)
		c.queue(n, v, gauge)
		// One series per replica: NAME, or NAME/i of several. A rolling
		// update's new replica beside the old on this node would repeat
		// the labels for a moment: the first is reported.
		seen := map[string]bool{}
		for _, l := range n.Leases {
			if !l.IsService() || seen[l.User+"\x00"+l.Service.Label()] {
				continue
			}
			seen[l.User+"\x00"+l.Service.Label()] = true
			up := 0.0
			if l.Service.State == service.Healthy {
				up = 1
			}
			gauge(descServiceUp, up, n.Name, l.Service.Label(), l.User, string(l.Service.State))
			counter(descServiceRest, uint64(l.Service.Restarts), n.Name, l.Service.Label(), l.User)
		}
	}
	if f := c.m.proxy.Load(); f != nil {
		for _, pc := range (*f)() {
			port := strconv.Itoa(pc.Port)
			counter(descProxyConns, pc.Forwarded, v.Self, pc.Name, pc.User, port, "forwarded")
			counter(descProxyConns, pc.Refused, v.Self, pc.Name, pc.User, port, "refused")
			counter(descProxyConns, pc.Failed, v.Self, pc.Name, pc.User, port, "failed")
		}
	}
	if len(st.Members) > 0 {
		states := map[string]int{queue.NodeAlive: 0, queue.NodeSuspect: 0, queue.NodeDead: 0, queue.NodeLeft: 0}
		for _, m := range st.Members {
			states[m.State]++
			if m.Name != v.Self && m.SinceHeard > 0 {
				gauge(descMemberHeard, float64(v.Now.Add(-m.SinceHeard).UnixNano())/1e9, m.Name)
			}
		}
		for s, n := range states {
			gauge(descMembers, float64(n), s)
		}
		g := st.Gossip
		counter(descGossipMsgs, g.MessagesIn, "in")
		counter(descGossipMsgs, g.MessagesOut, "out")
		counter(descGossipBytes, g.BytesIn, "in")
		counter(descGossipBytes, g.BytesOut, "out")
		counter(descGossipDrop, g.Dropped)
		counter(descGossipCrypt, g.DecryptFailures)
		counter(descGossipRefuse, g.StreamsRefused)
		counter(descGossipReqs, g.RemoteRequests)
		counter(descGossipReqErr, g.RemoteRequestErrs)
	}
}

type gaugeFunc func(d *prometheus.Desc, val float64, labels ...string)

// gpus is the hardware, as dcgm-exporter would show it.
func (c *collector) gpus(n *queue.NodeView, gauge gaugeFunc) {
	snap := n.Snap
	if !snap.TakenAt.IsZero() {
		gauge(descProbeTime, float64(snap.TakenAt.UnixNano())/1e9, n.Name)
	}
	host := snap.Host.Name
	if host == "" {
		host = n.Name
	}
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		l := []string{n.Name, strconv.Itoa(g.Index), g.UUID, g.PCIBusID, "nvidia" + strconv.Itoa(g.Index), g.Model, host}
		up := 1.0
		if g.Error != "" {
			up = 0
		}
		gauge(descGPUUp, up, l...)
		gauge(descGPUProcs, float64(len(g.Processes)), l...)
		if g.MemoryTotalMiB > 0 {
			gauge(descGPUMemTotal, mib(g.MemoryTotalMiB), l...)
			gauge(descGPUMemUsed, mib(g.MemoryUsedMiB), l...)
		}
		if g.UtilizationPct != nil {
			gauge(descGPUUtil, float64(*g.UtilizationPct), l...)
		}
		if g.TemperatureC != nil {
			gauge(descGPUTemp, float64(*g.TemperatureC), l...)
		}
		if g.PowerDrawW != nil {
			gauge(descGPUPower, *g.PowerDrawW, l...)
		}
		if g.PowerLimitW != nil {
			gauge(descGPUPowerCap, *g.PowerLimitW, l...)
		}
	}
}

func mib(v uint64) float64 { return float64(v) * (1 << 20) }

// leases says who holds each GPU of this node and how, and what the rules
// judge of it (squatted, idle), as the board shows them.
func (c *collector) leases(n *queue.NodeView, v queue.ClusterView, gauge gaugeFunc) {
	holder := map[int]*lease.Lease{}
	for i := range n.Leases {
		for _, g := range n.Leases[i].GPUs {
			holder[g] = &n.Leases[i]
		}
	}
	for i := range n.Snap.GPUs {
		g := &n.Snap.GPUs[i]
		idx := strconv.Itoa(g.Index)
		user, state := gpuState(g, holder[g.Index], v)
		gauge(descLease, 1, n.Name, idx, user, state)
		if l := holder[g.Index]; l != nil {
			gauge(descLeaseLeft, l.ExpiresAt.Sub(v.Now).Seconds(), n.Name, idx, l.User)
		}
		j := n.Judged[g.Index]
		gauge(descSquatted, b2f(j.Has(lease.FlagSquatted)), n.Name, idx)
		gauge(descIdle, b2f(j.Has(lease.FlagIdle)), n.Name, idx)
	}
}

// efficiency is each running lease's figures so far: what a dashboard
// needs to find the held-but-idle GPUs while they still are.
func (c *collector) efficiency(n *queue.NodeView, gauge gaugeFunc) {
	for i := range n.Leases {
		l := &n.Leases[i]
		f, ok := c.m.src.RunningFigures(l.ID)
		if !ok {
			continue
		}
		var sum float64
		var peak uint64
		reported := 0
		for _, g := range f.GPUs {
			if g.MeanSM != nil {
				sum += *g.MeanSM
				reported++
			}
			peak = max(peak, g.PeakMemMiB)
		}
		if reported > 0 && reported == len(f.GPUs) {
			gauge(descLeaseSM, sum/float64(reported), n.Name, l.ID, l.User)
		}
		if f.IdlePct != nil {
			gauge(descLeaseIdle, *f.IdlePct, n.Name, l.ID, l.User)
		}
		gauge(descLeasePeakMem, mib(peak), n.Name, l.ID, l.User)
	}
}

// gpuState is a GPU's one state for dibs_gpu_lease, and the user it names.
func gpuState(g *nodeprobe.GPU, l *lease.Lease, v queue.ClusterView) (user, state string) {
	switch {
	case l != nil && !l.ReservedUntil.IsZero():
		return l.User, StateReserved
	case l != nil && !l.PreemptedAt.IsZero():
		return l.User, StatePreempting
	case l != nil && !l.ExpiresAt.After(v.Now):
		return l.User, StateOverdue
	case l != nil:
		return l.User, StateHeld
	case g.Error != "":
		return "", StateDown
	case len(g.Processes) > 0:
		return g.Processes[0].User, StateUnleased
	}
	return "", StateFree
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// queue counts the entries submitted here: this agent is their source of
// truth, so summing every agent's counts gives the cluster's queue once.
func (c *collector) queue(n *queue.NodeView, v queue.ClusterView, gauge gaugeFunc) {
	waiting, running := 0, 0
	var oldest float64
	for i := range n.Queue {
		e := &n.Queue[i]
		if e.Running {
			running++
			continue
		}
		waiting++
		oldest = max(oldest, v.Now.Sub(e.SubmittedAt).Seconds())
	}
	gauge(descQueue, float64(waiting), "waiting")
	gauge(descQueue, float64(running), "running")
	gauge(descQueueOldest, oldest)
}
