package main

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/queue"
)

// The CLI claims a MIG instance and a budget on a shared GPU, books GPUs
// ahead, and `dibs ls` shows the MIG GPU as its instances, the shared GPU
// with its budgets and the booking, in 80 columns.
func TestCLIMIGSharedAndBookings(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb,2xA100-80GB")
	out, errOut, code := dibs(t, p.socket, nil, "claim", "--mig", "3g.40gb", "--note", "eval")
	if code != 0 || !strings.Contains(errOut, "MIG instance MIG-") || !strings.Contains(out, "CUDA_VISIBLE_DEVICES=MIG-") {
		t.Fatalf("claim --mig: exit %d\n%s%s", code, out, errOut)
	}
	out, errOut, code = dibs(t, p.socket, nil, "claim", "--mem", "20G", "--json")
	var r api.ClaimResponse
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.MemMiB != 20<<10 || r.CUDAVisibleDevices != "1" {
		t.Fatalf("claim --mem 20G: exit %d %+v\n%s%s", code, r, out, errOut)
	}
	if _, errOut, code = dibs(t, p.socket, nil, "claim", "-g", "1"); code != 0 {
		t.Fatalf("claim -g 1: %s", errOut)
	}
	_, errOut, code = dibs(t, p.socket, nil, "claim", "--mem", "70G")
	if code == 0 || !strings.Contains(errOut, "at most 60 GiB is free") {
		t.Errorf("claim --mem 70G beside 20G: exit %d, %q; want a refusal saying what is free", code, errOut)
	}
	out, errOut, code = dibs(t, p.socket, nil, "claim", "--queue", "--mem", "30G", "--json")
	r = api.ClaimResponse{}
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.MemMiB != 30<<10 || r.CUDAVisibleDevices != "1" {
		t.Fatalf("claim --queue --mem 30G: exit %d %+v\n%s%s", code, r, out, errOut)
	}
	// Tab after release offers the parts held as well as whole GPUs.
	out, errOut, code = dibs(t, p.socket, nil, "__complete", "release", "")
	for _, want := range []string{"node01-1\tMIG instance MIG-", "node01-2\t20.0G of GPU 1 on node01", "node01-3\tGPU 2 on node01", "node01-4\t30.0G of GPU 1 on node01"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("__complete release: exit %d, no %q in\n%s%s", code, want, out, errOut)
		}
	}
	out, errOut, code = dibs(t, p.socket, nil, "book", "-g", "1", "--at", "in 5h", "--for", "2h", "--note", "deadline")
	if code != 0 || !strings.Contains(out, "node01-5: GPU 1 on node01 booked") {
		t.Fatalf("book: exit %d\n%s%s", code, out, errOut)
	}
	_, errOut, code = dibs(t, p.socket, nil, "book", "-g", "1", "--at", "yesterday", "--for", "2h")
	if code == 0 || !strings.Contains(errOut, `--at: cannot read the time "yesterday"`) {
		t.Errorf("book --at yesterday: exit %d, %q", code, errOut)
	}
	out, _, _ = dibs(t, p.socket, nil, "ls")
	for _, line := range strings.Split(out, "\n") {
		if n := len([]rune(line)); n > 80 {
			t.Errorf("ls line is %d columns, want ≤ 80: %q", n, line)
		}
	}
	for _, want := range []string{"0 A100-SXM4-80GB", " MIG ", "├ 0:0   3g.40gb", "├ 0:1   2g.20gb    19.6G  free", " shared ", "├ budget           20.0G", "deadline"} {
		if !strings.Contains(out, want) {
			t.Errorf("ls does not show %q:\n%s", want, out)
		}
	}
	out, _, _ = dibs(t, p.socket, nil, "bookings", "--json")
	var bs api.Bookings
	if json.Unmarshal([]byte(out), &bs) != nil || len(bs.Bookings) != 1 || !bs.Bookings[0].Booked ||
		bs.Bookings[0].ExpiresAt.Sub(bs.Bookings[0].StartedAt) != 2*time.Hour {
		t.Fatalf("bookings --json: %s", out)
	}
	if out, errOut, code = dibs(t, p.socket, nil, "unbook", bs.Bookings[0].ID); code != 0 || !strings.Contains(out, "unbooked node01-5") {
		t.Errorf("unbook: exit %d %s%s", code, out, errOut)
	}
	if out, _, _ = dibs(t, p.socket, nil, "bookings"); !strings.Contains(out, "no bookings") {
		t.Errorf("bookings after unbook:\n%s", out)
	}
	// Weak 1 of issue 20: a booking that ends on another day says which
	// (a week's was printed "16:13 to 16:13"); a week is past the default
	// longest booking.
	out, errOut, code = dibs(t, p.socket, nil, "book", "-g", "1", "--at", "in 5h", "--for", "2d")
	end := time.Now().Add(53 * time.Hour).Local().Format("Mon ")
	if code != 0 || !strings.Contains(out, " to "+end) {
		t.Errorf("book --for 2d: exit %d, want the end printed with its day %q\n%s%s", code, end, out, errOut)
	}
	_, errOut, code = dibs(t, p.socket, nil, "book", "-g", "1", "--at", "in 3d", "--for", "7d")
	if code == 0 || !strings.Contains(errOut, "a booking may last at most 3d here") {
		t.Errorf("book --for 7d: exit %d, %q; want the default longest booking", code, errOut)
	}
}

// `dibs run --queue --mig` waits for a held instance, `dibs queue` shows
// what it asks for and why it waits, and it starts on the instance when its
// holder releases it; a profile nobody has is refused at submit.
func TestCLIQueuedMIG(t *testing.T) {
	agenttest.RequireTmux(t)
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "1xA100-80GB:mig=3g.40gb+2g.20gb+1g.10gb")
	if _, errOut, code := dibs(t, p.socket, nil, "claim", "--mig", "3g.40gb"); code != 0 {
		t.Fatalf("claim --mig: %s", errOut)
	}
	_, errOut, code := dibs(t, p.socket, nil, "run", "--queue", "--mig", "7g.80gb", "--", "true")
	if code == 0 || !strings.Contains(errOut, "no node has a MIG instance 7g.80gb (node01 has 3g.40gb, 2g.20gb, 1g.10gb)") {
		t.Errorf("run --queue --mig 7g.80gb: exit %d %q; want a refusal naming what there is", code, errOut)
	}
	out, errOut, code := dibs(t, p.socket, nil, "run", "--queue", "--mig", "3g.40gb", "--for", "1h", "--name", "queued-mig-e2e", "--", "sleep", "2")
	if code != 0 || !strings.Contains(out, "queued node01-q1") {
		t.Fatalf("run --queue --mig 3g.40gb: exit %d %q %q", code, out, errOut)
	}
	out, _, _ = dibs(t, p.socket, nil, "queue")
	for _, want := range []string{"node01-q1", "3g.40gb", "needs a MIG instance 3g.40gb, none free"} {
		if !strings.Contains(out, want) {
			t.Errorf("queue does not show %q:\n%s", want, out)
		}
	}
	if _, errOut, code = dibs(t, p.socket, nil, "release", "node01-1"); code != 0 {
		t.Fatalf("release: %s", errOut)
	}
	// It runs (or ran: it sleeps 2s) on the instance, the session named as
	// asked (a fixed name, apart from other tests' sessions).
	cl := api.NewClient(p.socket)
	agenttest.Eventually(t, 10*time.Second, "the queued run to start on the 3g.40gb instance", func() bool {
		st, err := cl.EntryStatus(context.Background(), "node01-q1")
		if err != nil || st.State == queue.EntryFailed {
			t.Fatalf("entry status %+v, %v", st, err)
		}
		b, err := cl.Board(context.Background())
		if err != nil {
			return false
		}
		for _, l := range b.Nodes[0].GPUs[0].Shares {
			if strings.HasPrefix(l.Entry, "node01-q1#") {
				return l.MIG == b.Nodes[0].GPUs[0].MIGDevices[0].UUID
			}
		}
		return st.State == queue.EntryFinished
	})
}
