package main

import (
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/outgrow/k8s"
	"github.com/dibs-gpu/dibs/service"
)

// TestK8sServiceFromTheBoard: `dibs export k8s NAME` finds the caller's
// service by name (each of its leases a replica, a MIG instance's profile
// from its node's GPUs, the node's pools), and refuses in one line a name
// nobody runs, a name several people run, and another person's service
// whose command the board does not show the caller.
func TestK8sServiceFromTheBoard(t *testing.T) {
	svc := func(id, user, node, name string, cmd []string) lease.Lease {
		l := lease.Lease{ID: id, User: user, Node: node, Kind: lease.KindService, GPUs: []int{0},
			Service: &service.Service{Spec: service.Spec{Name: name, Port: 8000, Health: "/health"}}}
		if cmd != nil {
			l.Job = &job.Job{Command: cmd, Env: map[string]string{"PATH": "/usr/bin"}}
		} else {
			l.Job = &job.Job{Kept: true}
		}
		return l
	}
	mig := svc("na-3", "ana", "na", "embed", []string{"serve"})
	mig.MIG, mig.Share = "MIG-bbb", 0.25
	second := svc("nb-1", "ana", "nb", "llm", []string{"vllm", "serve", "m"})
	second.Service.Replica, second.Service.Replicas = 1, 2
	b := api.Board{
		You: lease.Caller{User: "ana"},
		Nodes: []api.Node{{Name: "na", Host: nodeprobe.Host{Tags: []string{"inference"}}, GPUs: []api.GPU{{GPU: nodeprobe.GPU{Index: 0,
			MIGDevices: []nodeprobe.MIGDevice{{UUID: "MIG-aaa", Profile: "3g.40gb"}, {UUID: "MIG-bbb", Profile: "1g.10gb"}}}}}}},
		Services: []lease.Lease{
			svc("na-2", "ana", "na", "llm", []string{"vllm", "serve", "m"}),
			second,
			svc("nb-2", "bo", "nb", "llm", nil),
			svc("nb-3", "bo", "nb", "bos", nil),
			svc("nb-4", "cy", "nb", "both", nil),
			svc("nb-5", "bo", "nb", "both", nil),
			mig,
		},
	}
	s, err := k8sService(b, "llm", "")
	if err != nil {
		t.Fatal(err)
	}
	if s.Owner != "ana" || s.Replicas != 2 || s.Lease != "na-2" || s.GPUs != 1 || s.Port != 8000 || s.Health != "/health" ||
		strings.Join(s.Command, " ") != "vllm serve m" || s.Env["PATH"] != "/usr/bin" || strings.Join(s.Pools, ",") != "inference" {
		t.Errorf("llm is %+v", s)
	}
	if _, err := k8s.Export(s); err != nil {
		t.Errorf("export: %v", err)
	}
	s, err = k8sService(b, "embed", "")
	if err != nil || s.MIG != "1g.10gb" || s.GPUs != 0 || s.MIGUnknown {
		t.Errorf("embed is %+v, %v; want MIG 1g.10gb and no whole GPU", s, err)
	}
	for _, tc := range []struct{ name, owner, want string }{
		{"nope", "", "no service named nope runs"},
		{"bos", "", "service bos is bo's: only its owner and admins see its command"},
		{"llm", "bo", "service llm is bo's"},
		{"llm", "dee", "dee runs no service named llm"},
		{"both", "", "give --owner with one of them"},
		{"9x", "", "service name"},
	} {
		_, err := k8sService(b, tc.name, tc.owner)
		if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("k8sService(%q, owner %q) = %v, want one line with %q", tc.name, tc.owner, err, tc.want)
		}
	}
}
