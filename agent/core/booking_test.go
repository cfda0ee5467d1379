package core_test

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
)

// TestBookingArrivesWhole: a booking made at node01 of node02's GPUs is
// the booking node01 made of the request, carried as is: node02 books (or
// refuses) it by every field the person gave, keeps its run as the job to
// start, and node01 answers as soon as node02 has booked (a clock that
// never moves would hold an answer that waited for gossip).
func TestBookingArrivesWhole(t *testing.T) {
	start := t0.Add(2 * time.Hour)
	run := &api.RunSpec{Name: "train-7", Command: []string{"python", "train.py", "--lr", "3e-4"}, Dir: "/home/alice/exp",
		Env: map[string]string{"PATH": "/opt/conda/bin:/usr/bin", "VIRTUAL_ENV": "/home/alice/venv"}}
	tests := []struct {
		name string
		req  api.BookRequest
		// check reads node02's booking; wantErr is the refusal instead.
		check   func(t *testing.T, b lease.Lease)
		wantErr string
	}{
		{name: "named GPUs, the kind, the time, the note and the request id",
			req: api.BookRequest{GPUs: []int{1, 3}, Start: start, Duration: "90m", Kind: "batch", Note: "deadline run", RequestID: "req-book-0001"},
			check: func(t *testing.T, b lease.Lease) {
				if !slices.Equal(b.GPUs, []int{1, 3}) || b.Kind != lease.KindBatch || !b.StartedAt.Equal(start) || !b.ExpiresAt.Equal(start.Add(90*time.Minute)) ||
					b.Note != "deadline run" || b.RequestID != "req-book-0001" || b.Job != nil {
					t.Errorf("node02 booked GPUs %v, kind %s, %v to %v, note %q, request id %q, job %+v; want 1 and 3, batch, %v to %v, deadline run, req-book-0001, none",
						b.GPUs, b.Kind, b.StartedAt, b.ExpiresAt, b.Note, b.RequestID, b.Job, start, start.Add(90*time.Minute))
				}
			}},
		{name: "a count of a model node02 has",
			req: api.BookRequest{Count: 2, Model: "h100", Start: start, Duration: "1h"},
			check: func(t *testing.T, b lease.Lease) {
				if len(b.GPUs) != 2 || b.Kind != lease.KindInteractive {
					t.Errorf("node02 booked GPUs %v, kind %s; want two, interactive", b.GPUs, b.Kind)
				}
			}},
		{name: "a model node02 lacks", req: api.BookRequest{Count: 1, Model: "L40S", Start: start, Duration: "1h"}, wantErr: "L40S"},
		{name: "a pool node02 is not in", req: api.BookRequest{Count: 1, Tags: []string{"east"}, Start: start, Duration: "1h"}, wantErr: "east"},
		{name: "a run: kept as the job to start",
			req: api.BookRequest{Count: 1, Start: start, Duration: "1h", Run: run},
			check: func(t *testing.T, b lease.Lease) {
				j := b.Job
				if j == nil || j.Name != run.Name || !slices.Equal(j.Command, run.Command) || j.Dir != run.Dir || b.Session != "train-7" {
					t.Fatalf("node02 keeps job %+v, session %q; want %+v in session train-7", j, b.Session, run)
				}
				for k, v := range run.Env {
					if j.Env[k] != v {
						t.Errorf("the job's %s is %q; want %q", k, j.Env[k], v)
					}
				}
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newClusterOf(t, clock.NewFake(t0), map[string]users{
				"node01": accounts(1000, "alice"),
				"node02": accounts(2000, "alice"),
			}, clusterOptions{sessions: &started{}})
			req := tt.req
			req.Node = "node02"
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			got, err := asUser(c["node01"], "alice").Book(ctx, req)
			if ctx.Err() != nil {
				t.Fatalf("the booking answered only when its context ended: %v", err)
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("book: %v; want node02's refusal naming %q", err, tt.wantErr)
				}
				if n := len(c["node02"].node.State().Bookings); n != 0 {
					t.Errorf("after a refusal node02 holds %d bookings", n)
				}
				return
			}
			if err != nil {
				t.Fatalf("book: %v", err)
			}
			bs := c["node02"].node.State().Bookings
			if len(bs) != 1 || bs[0].ID != got.ID || bs[0].User != "alice" || bs[0].UID != 2000 || !bs[0].Booked {
				t.Fatalf("node02 holds bookings %v; want %s, alice's (uid 2000) alone", bs, got.ID)
			}
			tt.check(t, bs[0])
			if n := len(c["node01"].node.State().Bookings); n != 0 {
				t.Errorf("node01 holds %d bookings; want none, the GPUs are node02's", n)
			}
		})
	}
}

// TestBookingFromTheNetworkIsCheckedByItsOwner: what another agent sends is
// checked again where it lands — its bounds as it is decoded (the same
// Validate the edge runs), the session name by the launcher's rule — so a
// booking no edge here would have made books nothing.
func TestBookingFromTheNetworkIsCheckedByItsOwner(t *testing.T) {
	start := t0.Add(2 * time.Hour)
	tests := []struct {
		name string
		req  lease.BookRequest
		want string
	}{
		{name: "a session name tmux would rewrite", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour,
			Run: &job.RunSpec{Name: "a:b", Command: []string{"true"}}}, want: "invalid session name"},
		{name: "a count and indices", req: lease.BookRequest{Count: 1, GPUs: []int{0}, Start: start, Duration: time.Hour}, want: "both say which GPUs"},
		{name: "a note with an escape", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Note: "\x1b]0;x\x07"}, want: "note holds"},
		{name: "a request id too short", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, RequestID: "x"}, want: "request id"},
		{name: "a lead with a group", req: lease.BookRequest{Count: 1, Start: start, Duration: time.Hour, Group: "node01-7", Lead: true},
			want: "bad booking group"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sess := &started{}
			c := newClusterOf(t, clock.NewFake(t0), map[string]users{
				"node01": accounts(1000, "alice"),
				"node02": accounts(2000, "alice"),
			}, clusterOptions{sessions: sess})
			// As node01's agent would send it, past node01's own checks.
			body, _ := json.Marshal(map[string]any{"v": peer.Version, "actor": peer.As("alice"), "req": tt.req})
			_, code, msg := c["node02"].mux.Serve(context.Background(), "node01", peer.Book.Name, body)
			if code != refusal.CodeInvalid || !strings.Contains(msg, tt.want) {
				t.Fatalf("node02 answered %q %q; want an invalid refusal saying %q", code, msg, tt.want)
			}
			if n := len(c["node02"].node.State().Bookings); n != 0 {
				t.Errorf("after the refusal node02 holds %d bookings", n)
			}
		})
	}
}
