package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/outgrow/doctor"
)

// TestOneGPUIsSingular: the doctor's summary of a one-node, one-GPU cluster
// and a node's completion text say "1 GPU" and "1 node", never "1 GPUs".
func TestOneGPUIsSingular(t *testing.T) {
	var b bytes.Buffer
	printDoctor(&b, api.DoctorReport{
		Self:     "node01",
		Nodes:    []doctor.NodeHealth{{Node: "node01"}},
		Findings: &doctor.Findings{GPUs: 1, Nodes: 1},
		Verdict:  &doctor.Verdict{},
	})
	out := b.String()
	if !strings.Contains(out, "dibs doctor at node01: 1 node, 1 GPU\n") || !strings.Contains(out, "cluster        1 GPU on 1 node\n") {
		t.Errorf("doctor on one GPU:\n%s", out)
	}
	b.Reset()
	printDoctor(&b, api.DoctorReport{Self: "node01", Nodes: make([]doctor.NodeHealth, 2), Findings: &doctor.Findings{GPUs: 8, Nodes: 2}, Verdict: &doctor.Verdict{}})
	if out := b.String(); !strings.Contains(out, "2 nodes, 8 GPUs\n") || !strings.Contains(out, "8 GPUs on 2 nodes\n") {
		t.Errorf("doctor on eight GPUs:\n%s", out)
	}
	if got := counted(1, "GPU") + ", " + counted(0, "GPU") + ", " + counted(2, "node"); got != "1 GPU, 0 GPUs, 2 nodes" {
		t.Errorf("counted = %q", got)
	}
}
