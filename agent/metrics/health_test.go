package metrics_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"

	"github.com/dibs-gpu/dibs/agent/metrics"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/runrecord"
)

// noSource is an agent with nothing to say: the collector's own metrics
// are empty, the hooks' histograms are what a test observes.
type noSource struct{}

func (noSource) View() queue.ClusterView                         { return queue.ClusterView{} }
func (noSource) Status() api.Status                              { return api.Status{} }
func (noSource) RunningFigures(string) (runrecord.Figures, bool) { return runrecord.Figures{}, false }

// TestServiceHealthHistogramCountsChecksAndLints: each health check of a
// service is one observation of dibs_service_health_seconds under its
// node, name and owner, in the bucket of its time, and the family passes
// Prometheus' own lint (promtool check metrics runs the same rules).
func TestServiceHealthHistogramCountsChecksAndLints(t *testing.T) {
	m := metrics.New(noSource{}, nil)
	m.ObserveHealthCheck("node01", "web", "alice", 300*time.Microsecond)
	m.ObserveHealthCheck("node01", "web", "alice", 2*time.Millisecond)
	m.ObserveHealthCheck("node01", "dash", "bob", 5*time.Second)
	got, err := m.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var fam *dto.MetricFamily
	for _, f := range got {
		if f.GetName() != "dibs_service_health_seconds" {
			continue
		}
		fam = f
		if len(f.GetMetric()) != 2 || f.GetType() != dto.MetricType_HISTOGRAM {
			t.Errorf("%d series of type %s, want 2 histograms (web of alice, dash of bob)", len(f.GetMetric()), f.GetType())
		}
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			h := s.GetHistogram()
			switch labels["service"] {
			case "web":
				if h.GetSampleCount() != 2 || labels["user"] != "alice" || labels["node"] != "node01" {
					t.Errorf("web: %d checks, labels %v; want 2, alice on node01", h.GetSampleCount(), labels)
				}
				for _, b := range h.GetBucket() {
					if b.GetUpperBound() == .0005 && b.GetCumulativeCount() != 1 {
						t.Errorf("web: %d checks within 0.5 ms, want 1", b.GetCumulativeCount())
					}
				}
			case "dash":
				if h.GetSampleCount() != 1 || h.GetSampleSum() != 5 {
					t.Errorf("dash: %d checks summing %v s, want 1 of 5 s", h.GetSampleCount(), h.GetSampleSum())
				}
			}
		}
	}
	if fam == nil {
		t.Fatal("no dibs_service_health_seconds family")
	}
	problems, err := promlint.NewWithMetricFamilies([]*dto.MetricFamily{fam}).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint: %s: %s", p.Metric, p.Text)
	}
}
