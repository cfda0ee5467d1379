// Command gen writes one message of every kind the agents exchange, as
// the release it is built in encodes them, and checks messages with that
// release's decoders. It is how the fixtures of a release are made (once,
// from that release's commit) and how a test runs an old release's
// decoders on this release's messages:
//
//	git archive e4e3039 | tar -x -C /tmp/v010
//	mkdir /tmp/v010/cmd/wiregen
//	cp main.go gossip_glue.go place_v010.go /tmp/v010/cmd/wiregen/
//	cp ../../../wire_samples_test.go /tmp/v010/gossip/zz_wire.go
//	(cd /tmp/v010 && go run -tags wiregen_gossip,wiregen_v010 ./cmd/wiregen write DIR)
//	(cd /tmp/v010 && go run -tags wiregen_gossip,wiregen_v010 ./cmd/wiregen check FILE...)
//
// Gossip messages are gossip-NAME.bin (the framed message, as sent);
// peer requests peer-OP.json (the envelope, as sent to a protocol-6
// agent) and replies peer-OP-reply.json (as sent to a protocol-6 caller);
// summary.txt says what each decoded to. Built without the
// wiregen_gossip tag (in a tree whose gossip package lacks zz_wire.go)
// it writes and checks the peer messages only. It lives under testdata so
// the module's own build never sees it.
package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/agent/peer"
	"github.com/dibs-gpu/dibs/lease"
)

// recorder keeps what a call sent and ends the call.
type recorder struct{ body []byte }

func (r *recorder) Request(_ context.Context, _, _ string, body []byte) ([]byte, codeT, string, error) {
	r.body = append([]byte(nil), body...)
	return nil, "invalid", "recorded", nil
}

// Protocols says the other end speaks protocol 6 only (v0.1.0); a release
// whose Transport has no such method ignores it.
func (r *recorder) Protocols(string) (int, int, bool) { return 6, 6, true }

// replier answers every call with one reply.
type replier struct{ reply []byte }

func (r replier) Request(context.Context, string, string, []byte) ([]byte, codeT, string, error) {
	return r.reply, "", "", nil
}
func (r replier) Protocols(string) (int, int, bool) { return 6, 6, true }

// sample is one endpoint's request and reply, and what to do with them.
type sample struct {
	op string
	// write returns the request as sent to a protocol-6 agent and the
	// reply as sent to a protocol-6 caller.
	write func() (req, reply []byte, err error)
	// checkReq serves a request with this release's decoder; checkReply
	// reads a reply as this release's caller does.
	checkReq   func(body []byte) error
	checkReply func(body []byte) error
}

func add[Req, Resp peer.Message](out *[]sample, e peer.Endpoint[Req, Resp], who peer.Actor, req Req, resp Resp) {
	*out = append(*out, sample{
		op: e.Name,
		write: func() ([]byte, []byte, error) {
			m := peer.NewMux("node02")
			rec := &recorder{}
			m.SetTransport(rec)
			peer.Call(context.Background(), m, "node01", e, who, req)
			if rec.body == nil {
				return nil, nil, fmt.Errorf("%s: nothing sent", e.Name)
			}
			srv := peer.NewMux("node01")
			peer.Handle(srv, e, func(context.Context, string, peer.Actor, Req) (Resp, error) { return resp, nil })
			reply, code, msg := srv.Serve(context.Background(), "node02", e.Name, rec.body)
			if code != "" {
				return nil, nil, fmt.Errorf("%s: own request refused: %s %s", e.Name, code, msg)
			}
			return rec.body, reply, nil
		},
		checkReq: func(body []byte) error {
			srv := peer.NewMux("node01")
			peer.Handle(srv, e, func(context.Context, string, peer.Actor, Req) (Resp, error) { return resp, nil })
			if _, code, msg := srv.Serve(context.Background(), "node02", e.Name, body); code != "" {
				return fmt.Errorf("refused: %s %s", code, msg)
			}
			return nil
		},
		checkReply: func(body []byte) error {
			m := peer.NewMux("node02")
			m.SetTransport(replier{body})
			_, err := peer.Call(context.Background(), m, "node01", e, who, req)
			return err
		},
	})
}

func samples() []sample {
	t0 := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	l := lease.Lease{ID: "node01-7", Node: "node01", GPUs: []int{0, 1}, User: "alice", UID: 1001, Token: 7,
		Kind: lease.KindBatch, Note: "ablation sweep", StartedAt: t0, ExpiresAt: t0.Add(4 * time.Hour), Session: "dibs-node01-7"}
	// The entry is filled in place, by field: its type was lease.QueueEntry
	// in v0.1.0 and is queue.QueueEntry since, and this file builds in both.
	start := peer.StartRequest{Phase: peer.PhaseReserve, GPUs: []int{0, 1}, Gang: "node02-q3#0", Rank: 1}
	e := &start.Entry
	e.ID, e.Origin, e.User, e.UID, e.SubmittedAt = "node02-q3", "node02", "alice", 1001, t0
	e.Nodes, e.GPUsPerNode, e.Duration, e.Kind, e.Note = 2, 2, time.Hour, lease.KindBatch, "gang"
	e.Job = &jobT{Command: []string{"python", "train.py"}, Dir: "/home/alice"}
	var out []sample
	add(&out, peer.Claim, peer.As("alice"), peer.ClaimRequest{Count: 2, Duration: 4 * time.Hour, Note: "ablation sweep", Kind: lease.KindBatch,
		Run: &peer.Run{Command: []string{"python", "train.py"}, Dir: "/home/alice", Env: map[string]string{"PATH": "/usr/bin"}}, RequestID: "req-0123456789"},
		peer.LeaseReply{Lease: l})
	add(&out, peer.Release, peer.As("alice"), peer.ReleaseRequest{IDs: []string{"node01-7"}}, peer.ReleaseReply{Released: []string{"node01-7"}})
	add(&out, peer.Extend, peer.As("alice"), peer.ExtendRequest{ID: "node01-7", Duration: time.Hour}, peer.LeaseReply{Lease: l})
	add(&out, peer.Start, peer.As("alice"), start,
		peer.StartReply{Lease: l, Host: "127.0.0.1", Port: 29500})
	add(&out, peer.Started, peer.System, peer.StartedRequest{Key: "node02-q3#0"}, peer.Empty{})
	add(&out, peer.Place, peer.System, peer.PlaceRequest{Key: "node02-q3#0", Placer: "node01/ab12"}, placeReply(e.Job))
	add(&out, peer.Preempt, peer.System, peer.PreemptRequest{Lease: "node01-7", Token: 7, Reason: lease.PreemptGang, Signal: 15}, peer.Empty{})
	add(&out, peer.Cancel, peer.As("alice"), peer.CancelRequest{ID: "node02-q3"}, peer.Empty{})
	add(&out, peer.Refused, peer.System, peer.RefusedRequest{Key: "node02-q3#0", Node: "node01", Reason: "no account alice on node01"}, peer.Empty{})
	add(&out, peer.Usage, peer.As("alice"), peer.UsageRequest{Since: t0}, peer.UsageReply{GPUSeconds: map[string]float64{"alice": 7200}})
	return out
}

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: gen write DIR | gen check FILE...")
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "write":
		err = write(os.Args[2])
	case "check":
		err = check(os.Args[2:])
	default:
		err = fmt.Errorf("unknown mode %q", os.Args[1])
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
}

func write(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var summary []string
	gs, err := gossipSamples()
	if err != nil {
		return err
	}
	for name, b := range gs {
		if err := os.WriteFile(filepath.Join(dir, "gossip-"+name+".bin"), b, 0o644); err != nil {
			return err
		}
		s, err := gossipDecode(b)
		if err != nil {
			return fmt.Errorf("own %s: %w", name, err)
		}
		summary = append(summary, "gossip-"+name+".bin: "+s)
	}
	for _, s := range samples() {
		req, reply, err := s.write()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "peer-"+s.op+".json"), append(req, '\n'), 0o644); err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(dir, "peer-"+s.op+"-reply.json"), append(reply, '\n'), 0o644); err != nil {
			return err
		}
	}
	if len(summary) == 0 {
		return nil
	}
	slices.Sort(summary)
	return os.WriteFile(filepath.Join(dir, "summary.txt"), []byte(strings.Join(summary, "\n")+"\n"), 0o644)
}

// check reads every file with this release's decoders and prints one line
// each: "ok NAME: what it read" or "FAIL NAME: why".
func check(files []string) error {
	bySample := map[string]sample{}
	for _, s := range samples() {
		bySample[s.op] = s
	}
	failed := 0
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		name := filepath.Base(f)
		var what string
		switch {
		case strings.HasPrefix(name, "gossip-") && strings.HasSuffix(name, ".bin"):
			what, err = gossipDecode(b)
		case strings.HasPrefix(name, "peer-") && strings.HasSuffix(name, "-reply.json"):
			s, ok := bySample[strings.TrimSuffix(strings.TrimPrefix(name, "peer-"), "-reply.json")]
			if !ok {
				err = fmt.Errorf("no such endpoint")
			} else {
				err = s.checkReply(trimNL(b))
			}
		case strings.HasPrefix(name, "peer-") && strings.HasSuffix(name, ".json"):
			s, ok := bySample[strings.TrimSuffix(strings.TrimPrefix(name, "peer-"), ".json")]
			if !ok {
				err = fmt.Errorf("no such endpoint")
			} else {
				err = s.checkReq(trimNL(b))
			}
		default:
			continue
		}
		if err != nil {
			failed++
			fmt.Printf("FAIL %s: %v\n", name, err)
			continue
		}
		fmt.Printf("ok %s: %s\n", name, what)
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d refused", failed, len(files))
	}
	return nil
}

func trimNL(b []byte) []byte { return []byte(strings.TrimSuffix(string(b), "\n")) }
