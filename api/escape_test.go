package api

import (
	"fmt"
	"reflect"
	"testing"

	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/service"
)

const hostile = "\x1b]0;PWNED\x07\x1b[2J\u202e\u200b"

// fullBoard is a board with one of everything, every string hostile, so a
// field added to any type a board holds is filled too.
func fullBoard() Board {
	b := Board{
		Notices: []string{"x", "y"},
		Nodes: []Node{{GPUs: []GPU{{
			GPU: nodeprobe.GPU{
				MIGDevices: make([]nodeprobe.MIGDevice, 2),
				Links:      make([]nodeprobe.Link, 2),
				Processes:  make([]nodeprobe.Process, 2),
			},
			Flags: []lease.Flag{"f"},
			Lease: &lease.Lease{GPUs: []int{0}, Containers: make([]string, 1), CPUs: make([]string, 1), Service: placed()},
		}, {}}}, {}},
		// A service's lease on the board's list of services (one with no
		// GPU shows nowhere else), and on a GPU above.
		Services: []lease.Lease{{GPUs: []int{0}, CPUs: make([]string, 1), Service: placed()}, {}},
	}
	fill(reflect.ValueOf(&b).Elem())
	return b
}

// placed is a service with a placement, whose pools, model and nodes are text.
func placed() *service.Service {
	return &service.Service{Spec: service.Spec{Place: &service.Placement{Tags: make([]string, 2), Nodelist: make([]string, 2), Exclude: make([]string, 1)}}}
}

func fill(v reflect.Value) {
	switch v.Kind() {
	case reflect.String:
		v.SetString(hostile)
	case reflect.Pointer:
		if !v.IsNil() {
			fill(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i))
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			fill(v.Index(i))
		}
	}
}

// strings lists every string reachable from v.
func strs(v reflect.Value, path string, out map[string]string) {
	switch v.Kind() {
	case reflect.String:
		out[path] = v.String()
	case reflect.Pointer:
		if !v.IsNil() {
			strs(v.Elem(), path, out)
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				strs(v.Field(i), path+"."+v.Type().Field(i).Name, out)
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			strs(v.Index(i), fmt.Sprintf("%s[%d]", path, i), out)
		}
	}
}

// TestEscapedCoversEveryString: every string a board holds comes out of
// Escaped terminal-safe and visibly escaped, and the board passed in is
// left as it was (the SSH server shares one board between sessions).
func TestEscapedCoversEveryString(t *testing.T) {
	b := fullBoard()
	got := b.Escaped()
	all := map[string]string{}
	strs(reflect.ValueOf(got), "board", all)
	if len(all) < 40 {
		t.Fatalf("only %d strings filled; the test lost its reach", len(all))
	}
	want := termsafe.String(hostile)
	for path, s := range all {
		if s != want {
			t.Errorf("%s = %q, want %q", path, s, want)
		}
	}
	orig := map[string]string{}
	strs(reflect.ValueOf(b), "board", orig)
	for path, s := range orig {
		if s != hostile {
			t.Errorf("Escaped changed the board passed in: %s = %q", path, s)
		}
	}
}

func TestEscapedCleanBoardIsFree(t *testing.T) {
	b := Board{Self: "n1", You: lease.Caller{User: "alice"}, Nodes: []Node{{Name: "n1", State: NodeAlive, GPUs: []GPU{{
		GPU:   nodeprobe.GPU{Model: "NVIDIA H100 80GB HBM3", Processes: []nodeprobe.Process{{User: "bob", Command: "python train.py 训练 🚀"}}},
		Lease: &lease.Lease{ID: "n1-1", User: "alice", Note: "sweep"},
	}}}}}
	if n := testing.AllocsPerRun(50, func() { _ = b.Escaped() }); n > 1 {
		t.Errorf("Escaped allocates %v times on a clean board; it should only look", n)
	}
	if got := b.Escaped(); &got.Nodes[0] != &b.Nodes[0] {
		t.Error("a clean board was copied")
	}
}
