package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/service"
)

// A rolling update (`dibs serve NAME --update -- COMMAND`) is driven from
// here, the command line, one replica at a time: each new replica must be
// healthy before the next is touched, so the service never has fewer than
// all but one replica serving, and none fewer at all when a node has room
// for a new replica beside the old (surge). The agents know nothing of an
// update beyond admitting the new replica beside the one it replaces
// (Spec.Replaces). Ctrl-C stops the update once the replica in hand is
// done; a second one ends dibs at once (the replica in hand may then run
// twice, or not at all: dibs services shows which).

// updater replaces the caller's replicas of spec.Name with req's
// definition.
type updater struct {
	c    *cli
	cl   *api.Client
	req  api.ClaimRequest // the new definition: command, GPUs, placement
	spec service.Spec     // the new spec as flags gave it
	wait time.Duration    // how long a new replica may take to be healthy
	// changed reports whether a flag was given: flags not given keep
	// the old replica's values.
	changed func(string) bool
}

// updatePoll is how often an update looks at the board while it waits.
const updatePoll = 200 * time.Millisecond

func (u *updater) run() error {
	name := u.spec.Name
	ctx, cancel := reqCtx()
	olds, err := u.c.findReplicas(ctx, u.cl, name, true)
	cancel()
	if err != nil {
		return fmt.Errorf("%w: --update replaces a running service; start one with dibs serve %s -- COMMAND", err, safe(name))
	}
	for i := 1; i < len(olds); i++ {
		if olds[i].Replica == olds[i-1].Replica {
			return fmt.Errorf("replica %s runs twice (leases %s and %s; an update cut short?): stop the one you do not want (dibs stop LEASE), then update", safe(olds[i].label()), safe(olds[i-1].Lease), safe(olds[i].Lease))
		}
	}
	for _, o := range olds {
		if o.partial && o.units.MIG == "" && o.units.Mem == "" && !u.gpuFlags() {
			return fmt.Errorf("%s holds a MIG instance whose profile this node's board does not show: give --mig PROFILE with --update", safe(o.label()))
		}
	}
	if u.changed("replicas") && max(u.spec.Replicas, 1) != len(olds) {
		return fmt.Errorf("--update keeps the number of replicas (%s runs %d): leave --replicas out, or dibs stop %s and serve it again with --replicas %d", safe(name), len(olds), safe(name), max(u.spec.Replicas, 1))
	}
	// The first Ctrl-C is noted and the update stops before the next
	// replica; after it, Ctrl-C ends dibs as it would anywhere.
	var stopping atomic.Bool
	sig, quit := make(chan os.Signal, 1), make(chan struct{})
	signal.Notify(sig, os.Interrupt)
	defer close(quit)
	defer signal.Stop(sig)
	go func() {
		select {
		case <-sig:
			stopping.Store(true)
			signal.Stop(sig)
			fmt.Fprintln(u.c.stderr, "dibs: the update stops once the replica in hand is done (Ctrl-C again ends dibs now)")
		case <-quit:
		}
	}()
	done := make([]bool, len(olds))
	for i, old := range olds {
		if stopping.Load() {
			u.summary(olds, done)
			return fmt.Errorf("update of %s interrupted before %s: %d of %d replicas run the new command", safe(name), safe(old.label()), i, len(olds))
		}
		if err := u.one(old, len(olds)); err != nil {
			u.summary(olds, done)
			return err
		}
		done[i] = true
	}
	fmt.Fprintf(u.c.stdout, "service %s updated: %d replica%s run the new command\n", safe(name), len(olds), plural(len(olds)))
	return nil
}

// summary says which replicas run which command, when an update stops
// before its end.
func (u *updater) summary(olds []serviceRow, done []bool) {
	for i, o := range olds {
		what := "the old command"
		if done[i] {
			what = "the new command"
		}
		fmt.Fprintf(u.c.stdout, "%s: %s\n", safe(o.label()), what)
	}
}

// next is the claim of old's replica under the new definition: flags
// not given keep the old replica's values.
func (u *updater) next(old serviceRow) api.ClaimRequest {
	req := u.req
	spec := u.spec
	spec.Replica = old.Replica
	spec.Replicas = old.spec.Replicas // --update keeps the number of replicas
	if !u.changed("port") {
		spec.Port = old.spec.Port
	}
	if !u.changed("health") && !u.changed("health-cmd") {
		spec.Health, spec.HealthCmd = old.spec.Health, old.spec.HealthCmd
	}
	if !u.changed("preemptible") {
		spec.Preemptible = old.spec.Preemptible
	}
	if !u.gpuFlags() {
		req.Count, req.MIG, req.Mem = old.units.Count, old.units.MIG, old.units.Mem
	}
	kept := old.placed()
	if !u.changed("pool") && !u.changed("tag") {
		req.Tags = kept.Tags
	}
	if !u.changed("model") {
		req.Model = kept.Model
	}
	if !u.changed("cpus") && !u.changed("cpus-per-gpu") {
		req.CPUs, req.CPUsPerGPU = kept.CPUs, kept.CPUsPerGPU
	}
	if !u.changed("node") && !u.changed("nodelist") && !u.changed("exclude") {
		req.NodeChoice = kept.NodeChoice
	}
	req.Service = &spec
	return req
}

// placed is where old's replica was asked to run, as a claim asks for
// it: the pools (with the service pool its admission added), model,
// cores, --nodelist and --exclude its lease's service recorded
// (service.Placement), and --cpus any.
func (old serviceRow) placed() api.ClaimRequest {
	var req api.ClaimRequest
	if old.anyCPU {
		req.CPUs = "any"
	}
	if p := old.spec.Place; p != nil {
		req.Tags, req.Model, req.CPUsPerGPU = slices.Clone(p.Tags), p.Model, p.CPUsPerGPU
		req.NodeChoice = lease.NodeChoice{Only: slices.Clone(p.Nodelist), Exclude: slices.Clone(p.Exclude)}
	}
	return req
}

// gpuFlags reports whether the update says what to hold (-g, --ids,
// --mig, --mem); without them each replica keeps what it holds.
func (u *updater) gpuFlags() bool {
	return slices.ContainsFunc([]string{"gpus", "count", "ids", "mig", "mem"}, u.changed)
}

// one replaces one replica: beside the old when a node has room, else in
// its place with the gap said. A new replica that is not healthy within
// the wait is stopped and the old one kept (or started again).
func (u *updater) one(old serviceRow, n int) error {
	out := u.c.stdout
	label := safe(old.label())
	req := u.next(old)
	surge := req
	spec := *req.Service
	spec.Replaces = old.Lease
	surge.Service = &spec
	r, err := u.claim(surge)
	if err == nil {
		fmt.Fprintf(out, "%s: new replica on %s (lease %s) beside the old (lease %s on %s); waiting for it to be healthy\n", label, safe(r.Node), safe(r.ID), safe(old.Lease), safe(old.Node))
		if err := u.healthy(r.ID); err != nil {
			u.release(r.ID)
			return fmt.Errorf("%s: the new replica %s, so the update stopped: it is stopped and the old one (lease %s) keeps serving", label, err, safe(old.Lease))
		}
		if err := u.release(old.Lease); err != nil {
			return fmt.Errorf("%s: the new replica is healthy but stopping the old one (lease %s) failed: %w; dibs stop %s", label, safe(old.Lease), err, safe(old.Lease))
		}
		fmt.Fprintf(out, "%s: healthy on %s; the old one is stopped\n", label, safe(r.Node))
		return nil
	}
	var ae *api.Error
	if errors.As(err, &ae) && ae.Code == string(refusal.CodeInvalid) {
		return fmt.Errorf("%s: %w", label, err)
	}
	serving := n - 1
	fmt.Fprintf(out, "%s: no room for a new replica beside the old (%s): stopping it first, the service runs on %d of %d replica%s meanwhile\n", label, oneLine(err), serving, n, plural(n))
	if err := u.release(old.Lease); err != nil {
		return fmt.Errorf("%s: stopping the old replica (lease %s): %w", label, safe(old.Lease), err)
	}
	if req.Node == "" && req.NodeChoice.IsZero() {
		req.Node = old.Node // in its place
	}
	r, err = u.claim(req)
	if err == nil {
		fmt.Fprintf(out, "%s: new replica on %s (lease %s); waiting for it to be healthy\n", label, safe(r.Node), safe(r.ID))
		if err = u.healthy(r.ID); err == nil {
			fmt.Fprintf(out, "%s: healthy on %s\n", label, safe(r.Node))
			return nil
		}
		u.release(r.ID)
	}
	why := err.Error()
	if rerr := u.restore(old, n); rerr != nil {
		return fmt.Errorf("%s: the new replica %s, and starting the old one again failed too: %v; the service runs on %d of %d replica%s", label, why, rerr, serving, n, plural(n))
	}
	return fmt.Errorf("%s: the new replica %s, so the update stopped: the old command runs again in its place", label, why)
}

// restore starts old's replica again from its definition (restoreClaim).
func (u *updater) restore(old serviceRow, n int) error {
	req, err := restoreClaim(old)
	if err != nil {
		return err
	}
	r, err := u.claim(req)
	if err != nil {
		return err
	}
	fmt.Fprintf(u.c.stdout, "%s: the old command runs again on %s (lease %s)\n", safe(old.label()), safe(r.Node), safe(r.ID))
	return nil
}

// restoreClaim is the claim that starts old's replica again from its
// definition, where it was (within its --nodelist and --exclude when it
// was started with them: a kept list cannot go with --node).
func restoreClaim(old serviceRow) (api.ClaimRequest, error) {
	if old.job == nil || len(old.job.Command) == 0 {
		return api.ClaimRequest{}, errors.New("the board showed no definition of the old replica")
	}
	if old.partial && old.units.MIG == "" && old.units.Mem == "" {
		return api.ClaimRequest{}, errors.New("the board does not show the profile of the MIG instance it held")
	}
	spec := old.spec
	spec.Replaces = ""
	req := old.placed()
	req.Count, req.MIG, req.Mem = old.units.Count, old.units.MIG, old.units.Mem
	req.Service = &spec
	if req.NodeChoice.IsZero() {
		req.Node = old.Node
	}
	req.Run = &api.RunSpec{Command: old.job.Command, Dir: old.job.Dir, Env: old.job.Env}
	return req, nil
}

func (u *updater) claim(req api.ClaimRequest) (api.ClaimResponse, error) {
	ctx, cancel := reqCtx()
	defer cancel()
	return u.cl.Claim(ctx, req)
}

// release stops lease id's replica and waits (a few seconds at most)
// until this node's board no longer shows it: another node's lease ends
// there and reaches this one by gossip, and the replica's next claim is
// admitted against this node's view, which must not hold it still.
func (u *updater) release(id string) error {
	ctx, cancel := reqCtx()
	_, err := u.cl.Release(ctx, api.ReleaseRequest{IDs: []string{id}})
	cancel()
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(updatePoll) {
		ctx, cancel := reqCtx()
		b, err := u.cl.Board(ctx)
		cancel()
		if err == nil && !slices.ContainsFunc(b.Services, func(l lease.Lease) bool { return l.ID == id }) {
			return nil
		}
	}
	return nil // the claim that follows says so if it is still seen
}

// healthy waits until lease id's replica is healthy, at most u.wait; its
// error completes "the new replica …".
func (u *updater) healthy(id string) error {
	start := time.Now()
	deadline := start.Add(u.wait)
	last, seen := service.State(""), false
	for {
		ctx, cancel := reqCtx()
		b, err := u.cl.Board(ctx)
		cancel()
		if err == nil {
			i := slices.IndexFunc(b.Services, func(l lease.Lease) bool { return l.ID == id })
			if i < 0 && (seen || time.Since(start) > 10*time.Second) {
				// Another node's grant reaches this board by gossip:
				// unseen for a while, or seen and gone, it ended.
				return errors.New("ended before it was healthy (dibs logs shows why)")
			}
			if i >= 0 && b.Services[i].Service != nil {
				seen, last = true, b.Services[i].Service.State
				switch last {
				case service.Healthy:
					return nil
				case service.CrashLoop, service.Stopped:
					return fmt.Errorf("is %s (dibs logs %s shows why)", last, safe(id))
				}
			}
		}
		if time.Now().After(deadline) {
			if last == "" {
				last = "not seen"
			}
			return fmt.Errorf("was not healthy within --wait %s (it was %s)", u.wait, last)
		}
		time.Sleep(updatePoll)
	}
}

// oneLine is err's words on one line, for a progress line.
func oneLine(err error) string {
	return safe(strings.Join(strings.Fields(err.Error()), " "))
}
