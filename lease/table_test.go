package lease_test

import (
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
	"github.com/dibs-gpu/dibs/service"
)

func TestPlanClaim(t *testing.T) {
	box := islands(4, 4)
	taken012 := []lease.Lease{held(1, alice, []int{0, 1, 2}, t0.Add(-time.Hour), 4*time.Hour)}
	carol := lease.Caller{UID: 1003, User: "carol"}
	// Two PCIe switches, 0-1 and 2-3, joined at the host bridge.
	switches := topo(func(a, b int) nodeprobe.LinkKind {
		if a/2 == b/2 {
			return nodeprobe.LinkSingleSwitch
		}
		return nodeprobe.LinkHostBridge
	}, 4)
	flat := islands(1, 1, 1, 1)
	for i := range flat.GPUs {
		flat.GPUs[i].Links = nil // the probe could not read the topology
	}
	busy := withDown(withProc(box, 5, proc(9001, carol, "jupyter")), 7)

	tests := []struct {
		name   string
		leases []lease.Lease
		snap   nodeprobe.Snapshot
		claim  lease.Claim
		want   []int        // the GPUs granted, or
		code   refusal.Code // the refusal
		msg    []string     // and what it must say
	}{
		{name: "-g 2 on an empty node takes the first NVLink pair", snap: box, claim: lease.Claim{Count: 2}, want: []int{0, 1}},
		{name: "-g 2 lands in the whole island, not across the sockets", leases: taken012, snap: box, claim: lease.Claim{Count: 2}, want: []int{4, 5}},
		{name: "-g 1 takes the leftover GPU of the broken island", leases: taken012, snap: box, claim: lease.Claim{Count: 1}, want: []int{3}},
		{name: "-g 4 takes the free island", leases: taken012, snap: box, claim: lease.Claim{Count: 4}, want: []int{4, 5, 6, 7}},
		{name: "-g 5 has to cross", leases: taken012, snap: box, claim: lease.Claim{Count: 5}, want: []int{3, 4, 5, 6, 7}},
		{name: "-g 2 skips a GPU with an unleased process", leases: taken012, snap: withProc(box, 4, proc(4242, bob, "python")), claim: lease.Claim{Count: 2}, want: []int{5, 6}},
		{name: "-g 2 skips a GPU that is down", snap: withDown(box, 0), claim: lease.Claim{Count: 2}, want: []int{1, 2}},
		{name: "-g 2 keeps to one PCIe switch", leases: []lease.Lease{held(1, alice, []int{0}, t0, time.Hour)}, snap: switches, claim: lease.Claim{Count: 2}, want: []int{2, 3}},
		{name: "-g 2 without topology takes the lowest free", leases: []lease.Lease{held(1, alice, []int{1}, t0, time.Hour)}, snap: flat, claim: lease.Claim{Count: 2}, want: []int{0, 2}},

		{name: "--gpus in any order", snap: box, claim: lease.Claim{GPUs: []int{5, 3}}, want: []int{3, 5}},
		{name: "--gpus with a matching -g", snap: box, claim: lease.Claim{Count: 2, GPUs: []int{3, 5}}, want: []int{3, 5}},
		{name: "--gpus busy but unleased names whose process", snap: withProc(box, 3, proc(4242, alice, "python train.py")), claim: lease.Claim{GPUs: []int{3}},
			code: refusal.CodeConflict, msg: []string{"GPU 3 has no lease", "alice's process python train.py (pid 4242)", "pick another GPU", "--force"}},
		{name: "--gpus busy but unleased with --force", snap: withProc(box, 3, proc(4242, alice, "python train.py")), claim: lease.Claim{GPUs: []int{3}, Force: true}, want: []int{3}},
		{name: "--gpus busy by a process of an unnamed uid", snap: withProc(box, 3, nodeprobe.Process{PID: 7, UID: 1007, Command: "a.out"}), claim: lease.Claim{GPUs: []int{3}},
			code: refusal.CodeConflict, msg: []string{"uid 1007's process a.out (pid 7)"}},
		{name: "--gpus leased names holder and end", leases: taken012, snap: box, claim: lease.Claim{GPUs: []int{4, 1}},
			code: refusal.CodeConflict, msg: []string{"GPU 1 is held by alice for 3h more", "lease gpu-01-1", "pick another GPU, or ask alice"}},
		{name: "-g over an overdue lease", leases: []lease.Lease{held(1, alice, []int{1}, t0.Add(-5*time.Hour), 4*time.Hour)}, snap: box, claim: lease.Claim{Count: 8},
			code: refusal.CodeConflict, msg: []string{"alice holds GPU 1 1h past its end"}},
		{name: "--gpus leased past its end", leases: []lease.Lease{held(1, alice, []int{1}, t0.Add(-5*time.Hour), 4*time.Hour)}, snap: box, claim: lease.Claim{GPUs: []int{1}},
			code: refusal.CodeConflict, msg: []string{"GPU 1 is held by alice 1h past its end"}},
		{name: "--force does not override a lease", leases: taken012, snap: box, claim: lease.Claim{GPUs: []int{1}, Force: true},
			code: refusal.CodeConflict, msg: []string{"held by alice"}},
		{name: "--gpus down", snap: withDown(box, 6), claim: lease.Claim{GPUs: []int{6}, Force: true},
			code: refusal.CodeUnavailable, msg: []string{"GPU 6 on gpu-01 is down (GPU is lost)", "pick another GPU"}},
		{name: "--gpus down and leased", leases: taken012, snap: withDown(box, 1), claim: lease.Claim{GPUs: []int{1}},
			code: refusal.CodeUnavailable, msg: []string{"GPU 1 on gpu-01 is down"}},
		{name: "--gpus nonexistent", snap: box, claim: lease.Claim{GPUs: []int{8}},
			code: refusal.CodeInvalid, msg: []string{"no GPU 8 on gpu-01", "it has GPUs 0-7"}},
		{name: "--gpus negative", snap: box, claim: lease.Claim{GPUs: []int{-1}},
			code: refusal.CodeInvalid, msg: []string{"no GPU -1 on gpu-01"}},
		{name: "--gpus nonexistent on a node with a gap", snap: nodeprobe.Snapshot{GPUs: slices.Delete(slices.Clone(box.GPUs), 2, 3)}, claim: lease.Claim{GPUs: []int{2}},
			code: refusal.CodeInvalid, msg: []string{"it has GPUs 0,1,3,4,5,6,7"}},
		{name: "--gpus twice", snap: box, claim: lease.Claim{GPUs: []int{2, 2}},
			code: refusal.CodeInvalid, msg: []string{"GPU 2 named twice"}},
		{name: "-g and --ids disagree", snap: box, claim: lease.Claim{Count: 3, GPUs: []int{1, 2}},
			code: refusal.CodeInvalid, msg: []string{"-g 3 and --ids 1,2 both say which GPUs", "give -g N for any N free GPUs, or --ids"}},
		{name: "-g 1 and two --ids disagree", snap: box, claim: lease.Claim{Count: 1, GPUs: []int{1, 2}},
			code: refusal.CodeInvalid, msg: []string{"-g 1 and --ids 1,2 both say which GPUs"}},
		{name: "neither -g nor --ids", snap: box, claim: lease.Claim{},
			code: refusal.CodeInvalid, msg: []string{"-g N", "--ids 0,2"}},
		{name: "more GPUs than the node has", snap: box, claim: lease.Claim{Count: 9},
			code: refusal.CodeInvalid, msg: []string{"gpu-01 has only 8 GPUs; asked for 9", "at most 8", "several nodes"}},
		{name: "more than free says who holds the rest and until when",
			leases: []lease.Lease{taken012[0], held(2, bob, []int{4}, t0.Add(-time.Hour), 90*time.Minute)},
			snap:   busy, claim: lease.Claim{Count: 4},
			code: refusal.CodeConflict, msg: []string{
				"asked for 4 GPUs but only 2 free on gpu-01",
				"alice holds GPUs 0,1,2 for 3h more", "you hold GPU 4 for 30m more",
				"carol runs unleased processes on GPU 5", "GPU 7 down", "ask for 2 or fewer",
			}},
		{name: "nothing free", leases: []lease.Lease{held(1, alice, []int{0, 1, 2, 3, 4, 5, 6, 7}, t0, time.Hour)}, snap: box, claim: lease.Claim{Count: 1},
			code: refusal.CodeConflict, msg: []string{"asked for 1 GPU but only 0 free", "alice holds GPUs 0,1,2,3,4,5,6,7 for 1h more", "wait for them"}},
		{name: "nothing free, all of it yours", leases: []lease.Lease{held(1, bob, []int{0, 1, 2, 3, 4, 5, 6, 7}, t0, time.Hour)}, snap: box, claim: lease.Claim{Count: 1},
			code: refusal.CodeConflict, msg: []string{"you hold GPUs 0,1,2,3,4,5,6,7 for 1h more", "release what you hold there"}},
		{name: "a named GPU you already hold", leases: []lease.Lease{held(1, bob, []int{2}, t0, time.Hour)}, snap: box, claim: lease.Claim{GPUs: []int{2}},
			code: refusal.CodeConflict, msg: []string{"you already hold GPU 2 for 1h more (lease gpu-01-1"}},
		{name: "negative duration", snap: box, claim: lease.Claim{Count: 1, Duration: -5 * time.Minute},
			code: refusal.CodeInvalid, msg: []string{"positive", "-5m"}},
		{name: "over the interactive maximum", snap: box, claim: lease.Claim{Count: 1, Duration: 8 * 24 * time.Hour},
			code: refusal.CodeInvalid, msg: []string{"8d is over the interactive maximum of 7d", "--for 7d"}},
		{name: "over the batch maximum", snap: box, claim: lease.Claim{Count: 1, Kind: lease.KindBatch, Duration: 7*24*time.Hour + time.Minute},
			code: refusal.CodeInvalid, msg: []string{"over the batch maximum of 7d"}},
		{name: "named GPU with a hostile process", snap: withProc(box, 3, proc(666, alice, "\x1b]0;PWNED\x07\x1b[2J")), claim: lease.Claim{GPUs: []int{3}},
			code: refusal.CodeConflict, msg: []string{`process \x1b]0;PWNED\x07\x1b[2J (pid 666)`}},
		{name: "unknown kind", snap: box, claim: lease.Claim{Count: 1, Kind: "gpu"},
			code: refusal.CodeInvalid, msg: []string{`unknown lease kind "gpu"`, "interactive or batch"}},
		{name: "node with no GPUs", snap: nodeprobe.Snapshot{Host: nodeprobe.Host{Name: node}}, claim: lease.Claim{Count: 1},
			code: refusal.CodeUnavailable, msg: []string{"gpu-01 has no GPUs"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tab := table(tt.leases...)
			l, err := tab.PlanClaim(bob, tt.claim, tt.snap, t0, lease.DefaultPolicy())
			if tt.code != "" {
				checkRefusal(t, err, tt.code, tt.msg...)
				return
			}
			if err != nil {
				t.Fatalf("PlanClaim: %v", err)
			}
			if !slices.Equal(l.GPUs, tt.want) {
				t.Errorf("GPUs = %v, want %v", l.GPUs, tt.want)
			}
			if l.User != "bob" || l.UID != 1002 || l.Node != node {
				t.Errorf("lease is for %s (uid %d) on %s, want bob (uid 1002) on %s", l.User, l.UID, l.Node, node)
			}
			if tab.Len() != len(tt.leases) {
				t.Errorf("PlanClaim changed the table: %d leases, want %d", tab.Len(), len(tt.leases))
			}
		})
	}
}

func TestPlanClaimTerms(t *testing.T) {
	p := lease.DefaultPolicy()
	tests := []struct {
		name  string
		claim lease.Claim
		dur   time.Duration
		kind  lease.Kind
	}{
		{"interactive by default, for 4h", lease.Claim{Count: 1}, 4 * time.Hour, lease.KindInteractive},
		{"batch defaults to 24h", lease.Claim{Count: 1, Kind: lease.KindBatch}, 24 * time.Hour, lease.KindBatch},
		{"asked-for time", lease.Claim{Count: 1, Duration: 90 * time.Minute}, 90 * time.Minute, lease.KindInteractive},
		{"exactly the maximum", lease.Claim{Count: 1, Duration: p.MaxInteractive}, p.MaxInteractive, lease.KindInteractive},
		{"note of exactly the limit", lease.Claim{Count: 1, Note: strings.Repeat("é", words.MaxNoteLen/2)}, 4 * time.Hour, lease.KindInteractive},
		{"note in other scripts and emoji", lease.Claim{Count: 1, Note: "训练 모델 שלום 🚀 ❤️"}, 4 * time.Hour, lease.KindInteractive},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// A now with a monotonic reading, as the agent passes: the
			// lease must carry wall-clock times only (they go to disk).
			now := time.Now()
			l, err := table().PlanClaim(alice, tt.claim, islands(4, 4), now, p)
			if err != nil {
				t.Fatalf("PlanClaim: %v", err)
			}
			if l.Kind != tt.kind {
				t.Errorf("kind = %q, want %q", l.Kind, tt.kind)
			}
			if got := l.ExpiresAt.Sub(l.StartedAt); got != tt.dur {
				t.Errorf("lease runs %s, want %s", got, tt.dur)
			}
			if !l.StartedAt.Equal(now) {
				t.Errorf("StartedAt = %v, want %v", l.StartedAt, now)
			}
			if l.StartedAt != l.StartedAt.Round(0) || l.ExpiresAt != l.ExpiresAt.Round(0) {
				t.Errorf("lease times carry a monotonic reading: %v, %v", l.StartedAt, l.ExpiresAt)
			}
			if l.Note != tt.claim.Note {
				t.Errorf("note = %q, want %q", l.Note, tt.claim.Note)
			}
		})
	}
}

// Tokens fence stale actors, so every grant on a node gets a token higher
// than any granted before, across plans, Puts, Removes and restarts.
func TestTokensOnlyRise(t *testing.T) {
	snap, p := islands(4, 4), lease.DefaultPolicy()
	tab := lease.NewTable(node, nil, 41, lease.At(t0))
	l, err := tab.PlanClaim(alice, lease.Claim{Count: 1}, snap, t0, p)
	if err != nil {
		t.Fatal(err)
	}
	if l.Token != 42 || l.ID != "gpu-01-42" {
		t.Fatalf("first grant after token 41 = %d (%s), want 42 (gpu-01-42)", l.Token, l.ID)
	}
	if again, _ := tab.PlanClaim(bob, lease.Claim{Count: 1}, snap, t0, p); again.Token != 42 {
		t.Errorf("a plan that was never Put used up a token: next plan got %d, want 42", again.Token)
	}
	var last uint64 = 41
	var kept string
	for i := range 20 {
		now := t0.Add(time.Duration(i) * time.Minute)
		l, err := tab.PlanClaim(alice, lease.Claim{Count: 1}, snap, now, p)
		if err != nil {
			t.Fatalf("claim %d: %v", i, err)
		}
		if l.Token <= last {
			t.Fatalf("claim %d got token %d after %d", i, l.Token, last)
		}
		if id, want := l.ID, lease.LeaseID(node, l.Token); id != want {
			t.Errorf("id = %q, want %q", id, want)
		}
		last = l.Token
		tab.Put(l, lease.At(now))
		if tab.LastToken() != l.Token {
			t.Errorf("LastToken = %d after Put of %d", tab.LastToken(), l.Token)
		}
		// Leases come and go; a released lease's token is never handed
		// out again.
		if kept != "" {
			tab.Remove(kept)
			kept = ""
		}
		if i%3 == 0 {
			kept = l.ID
		} else {
			tab.Remove(l.ID)
		}
	}
	// Put of an old lease (a late store read) never lowers the counter.
	tab.Put(held(3, alice, []int{7}, t0, time.Hour), lease.At(t0))
	if tab.LastToken() != last {
		t.Errorf("LastToken = %d after Put of token 3, want %d", tab.LastToken(), last)
	}
	// A store whose counter lags its leases cannot make a token repeat.
	tab = lease.NewTable(node, []lease.Lease{held(50, alice, []int{0}, t0, time.Hour)}, 41, lease.At(t0))
	if l, _ := tab.PlanClaim(bob, lease.Claim{Count: 1}, snap, t0, p); l.Token != 51 {
		t.Errorf("after a lease with token 50 and a counter of 41, next token = %d, want 51", l.Token)
	}
}

func TestLeaseIDs(t *testing.T) {
	for _, n := range []string{"gpu01", "gpu-01", "node.example.com", "rack-2.gpu-07.lab", "a-1-2", "x"} {
		for _, tok := range []uint64{1, 42, 1<<64 - 1} {
			id := lease.LeaseID(n, tok)
			got, ok := lease.NodeOfID(id)
			if !ok || got != n {
				t.Errorf("NodeOfID(%q) = %q, %v; want %q, true", id, got, ok, n)
			}
		}
	}
	for _, id := range []string{"", "gpu01", "-7", "gpu-", "gpu-x", "gpu-+1", "gpu-1.5", "gpu- 1", "gpu-18446744073709551616"} {
		if got, ok := lease.NodeOfID(id); ok {
			t.Errorf("NodeOfID(%q) = %q, true; want false", id, got)
		}
	}
}

func TestEnv(t *testing.T) {
	l := held(7, alice, []int{4, 5}, t0, time.Hour)
	env := l.Env()
	want := map[string]string{
		"CUDA_VISIBLE_DEVICES": "4,5", "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
		"DIBS_LEASE_ID": "gpu-01-7", "DIBS_LEASE_TOKEN": "7", "DIBS_NODE": node,
	}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s = %q, want %q", k, env[k], v)
		}
	}
}

func TestParseKind(t *testing.T) {
	for in, want := range map[string]lease.Kind{"": lease.KindInteractive, "interactive": lease.KindInteractive, " Batch ": lease.KindBatch, "BATCH": lease.KindBatch} {
		if got, err := lease.ParseKind(in); err != nil || got != want {
			t.Errorf("ParseKind(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	_, err := lease.ParseKind("gpu")
	checkRefusal(t, err, refusal.CodeInvalid, `"gpu"`, "use interactive or batch")
}

// TestKindServiceIsRefusedAlikeAtEveryDoor: a lease of kind service is
// made by `dibs serve` alone, and every other door a kind comes in by
// says so in the same words: the CLI's --kind and a booking (which said
// "unknown lease kind" before), a claim from the socket, and one from a
// peer (which said "not dibs claim --kind service").
func TestKindServiceIsRefusedAlikeAtEveryDoor(t *testing.T) {
	const want = "a service lease is started with dibs serve NAME -- COMMAND, not with --kind service"
	for _, in := range []string{"service", " Service "} {
		_, err := lease.ParseKind(in)
		checkRefusal(t, err, refusal.CodeInvalid, want)
	}
	err := lease.BookRequest{Count: 1, Start: t0.Add(time.Hour), Duration: time.Hour, Kind: lease.KindService}.Validate()
	checkRefusal(t, err, refusal.CodeInvalid, want)
	err = lease.Claim{Count: 1, Kind: lease.KindService}.Validate()
	checkRefusal(t, err, refusal.CodeInvalid, want)
}

func TestPlanRelease(t *testing.T) {
	tab := table(held(1, alice, []int{0, 1}, t0, time.Hour))
	tests := []struct {
		name   string
		caller lease.Caller
		id     string
		code   refusal.Code
		msg    []string
	}{
		{name: "holder", caller: alice, id: "gpu-01-1"},
		{name: "holder under another name, same uid", caller: lease.Caller{UID: 1001}, id: "gpu-01-1"},
		{name: "admin", caller: root, id: "gpu-01-1"},
		{name: "someone else", caller: bob, id: "gpu-01-1", code: refusal.CodeForbidden, msg: []string{"lease gpu-01-1 belongs to alice", "only they (or an admin)"}},
		{name: "same name, other uid", caller: lease.Caller{UID: 2001, User: "alice"}, id: "gpu-01-1", code: refusal.CodeForbidden},
		{name: "unknown id", caller: alice, id: "gpu-01-9", code: refusal.CodeNotFound, msg: []string{"no lease gpu-01-9 on gpu-01", "dibs ls"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := tab.PlanRelease(tt.caller, tt.id)
			if tt.code != "" {
				checkRefusal(t, err, tt.code, tt.msg...)
				return
			}
			if err != nil || l.ID != tt.id {
				t.Fatalf("PlanRelease = %s, %v; want %s", l.ID, err, tt.id)
			}
			if tab.Len() != 1 {
				t.Errorf("PlanRelease changed the table")
			}
		})
	}
}

func TestPlanExtend(t *testing.T) {
	p := lease.DefaultPolicy()
	now := t0.Add(time.Hour)
	live := held(1, alice, []int{0, 1}, t0, 4*time.Hour) // 3h left at now
	noticed := held(2, alice, []int{2}, t0.Add(-4*time.Hour), 4*time.Hour)
	noticed.Warned, noticed.OverdueNoticed, noticed.SignalledAt = true, true, t0.Add(10*time.Second)
	overdue := noticed // 1h past its end at now
	overdue.ID, overdue.Token, overdue.GPUs = "gpu-01-3", 3, []int{3}
	full := held(4, alice, []int{4}, now, p.MaxInteractive)
	batch := held(5, alice, []int{5}, t0, 24*time.Hour)
	batch.Kind = lease.KindBatch
	p.MaxBatch = 30 * 24 * time.Hour
	tab := table(live, noticed, overdue, full, batch)

	tests := []struct {
		name   string
		caller lease.Caller
		id     string
		d      time.Duration
		want   time.Time
		code   refusal.Code
		msg    []string
	}{
		{name: "from the current end, not from now", caller: alice, id: "gpu-01-1", d: 2 * time.Hour, want: t0.Add(6 * time.Hour)},
		{name: "up to the maximum from now", caller: alice, id: "gpu-01-1", d: p.MaxInteractive - 3*time.Hour, want: now.Add(p.MaxInteractive)},
		{name: "an overdue lease from now", caller: alice, id: "gpu-01-3", d: 2 * time.Hour, want: now.Add(2 * time.Hour)},
		{name: "batch under the batch maximum", caller: alice, id: "gpu-01-5", d: 10 * 24 * time.Hour, want: t0.Add(11 * 24 * time.Hour)},
		{name: "over the maximum names the room left", caller: alice, id: "gpu-01-1", d: p.MaxInteractive,
			code: refusal.CodeInvalid, msg: []string{"would end it 7d3h from now", "over the interactive maximum of 7d", "extend by at most 6d21h"}},
		{name: "an overdue lease over the maximum", caller: alice, id: "gpu-01-3", d: 8 * 24 * time.Hour,
			code: refusal.CodeInvalid, msg: []string{"extend by at most 7d"}},
		{name: "already at the maximum", caller: alice, id: "gpu-01-4", d: 30 * time.Minute,
			code: refusal.CodeInvalid, msg: []string{"already ends 7d from now, the interactive maximum"}},
		{name: "someone else's", caller: bob, id: "gpu-01-1", d: time.Hour,
			code: refusal.CodeForbidden, msg: []string{"belongs to alice", "only they can extend it"}},
		// Admins may end any lease, but time is the holder's to ask for.
		{name: "an admin cannot extend someone's lease", caller: root, id: "gpu-01-1", d: time.Hour, code: refusal.CodeForbidden},
		{name: "unknown", caller: alice, id: "gpu-01-77", d: time.Hour, code: refusal.CodeNotFound, msg: []string{"no lease gpu-01-77"}},
		{name: "by zero", caller: alice, id: "gpu-01-1", d: 0, code: refusal.CodeInvalid, msg: []string{"positive", "--for 2h"}},
		{name: "by a negative", caller: alice, id: "gpu-01-1", d: -time.Hour, code: refusal.CodeInvalid},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := tab.PlanExtend(tt.caller, tt.id, tt.d, lease.At(now), p)
			if tt.code != "" {
				checkRefusal(t, err, tt.code, tt.msg...)
				return
			}
			if err != nil {
				t.Fatalf("PlanExtend: %v", err)
			}
			if !l.ExpiresAt.Equal(tt.want) {
				t.Errorf("ExpiresAt = %v, want %v", l.ExpiresAt, tt.want)
			}
			if l.Warned || l.OverdueNoticed || !l.SignalledAt.IsZero() {
				t.Errorf("extended lease keeps old notices: warned %v, overdue noticed %v, signalled %v", l.Warned, l.OverdueNoticed, l.SignalledAt)
			}
			if old, _ := tab.Get(tt.id); old.ExpiresAt.Equal(l.ExpiresAt) {
				t.Errorf("PlanExtend changed the table")
			}
		})
	}
}

// The room a refusal offers is room the next try gets.
func TestPlanExtendOfferedRoomFits(t *testing.T) {
	p := lease.DefaultPolicy()
	now := t0.Add(time.Hour)
	for _, start := range []time.Time{t0, t0.Add(-5 * time.Hour), t0.Add(-3*24*time.Hour - 17*time.Minute)} {
		l := held(1, alice, []int{0}, start, 4*time.Hour+23*time.Second)
		tab := table(l)
		_, err := tab.PlanExtend(alice, l.ID, 30*24*time.Hour, lease.At(now), p)
		m := regexp.MustCompile(`at most (\S+)$`).FindStringSubmatch(fmt.Sprint(err))
		if m == nil {
			t.Errorf("lease ending %s: refusal %q offers no room", l.ExpiresAt.Sub(now), err)
			continue
		}
		room, perr := words.ParseDuration(m[1])
		if perr != nil {
			t.Fatalf("offered room %q does not parse: %v", m[1], perr)
		}
		if _, err := tab.PlanExtend(alice, l.ID, room, lease.At(now), p); err != nil {
			t.Errorf("lease ending %s: offered %s, but extending by it fails: %v", l.ExpiresAt.Sub(now), m[1], err)
		}
	}
}

func TestPlanAdopt(t *testing.T) {
	p := lease.DefaultPolicy()
	box := withProc(withProc(islands(4, 4), 4, proc(777, bob, "python train.py")), 5, proc(777, bob, "python train.py"))
	mig := withProc(withProc(box, 2, proc(888, bob, "mig-job")), 2, proc(888, bob, "mig-job"))
	onAlice := withProc(box, 1, proc(999, bob, "sneaky"))
	onBob := withProc(box, 6, proc(555, bob, "second"))
	unknown := withProc(box, 3, nodeprobe.Process{PID: 444, UID: -1, Command: "?"})
	tab := table(held(1, alice, []int{0, 1}, t0, time.Hour), held(2, bob, []int{6}, t0, time.Hour))

	tests := []struct {
		name   string
		caller lease.Caller
		snap   nodeprobe.Snapshot
		pid    int
		d      time.Duration
		note   string
		want   []int
		code   refusal.Code
		msg    []string
	}{
		{name: "owner adopts the GPUs of their pid", caller: bob, snap: box, pid: 777, want: []int{4, 5}},
		{name: "with a note and a time", caller: bob, snap: box, pid: 777, d: time.Hour, note: "sweep 3", want: []int{4, 5}},
		{name: "a pid on two MIG slices of one GPU", caller: bob, snap: mig, pid: 888, want: []int{2}},
		{name: "an admin adopts for the owner", caller: root, snap: box, pid: 777, want: []int{4, 5}},
		{name: "someone else's pid", caller: alice, snap: box, pid: 777,
			code: refusal.CodeForbidden, msg: []string{"pid 777 belongs to bob, not you"}},
		{name: "a pid whose owner is unknown", caller: alice, snap: unknown, pid: 444,
			code: refusal.CodeForbidden, msg: []string{"belongs to an unknown user"}},
		{name: "on a GPU leased by another", caller: bob, snap: onAlice, pid: 999,
			code: refusal.CodeConflict, msg: []string{"GPU 1 is held by alice (lease gpu-01-1)"}},
		{name: "on a GPU already in the owner's lease", caller: bob, snap: onBob, pid: 555,
			code: refusal.CodeConflict, msg: []string{"GPU 6 is already in your lease gpu-01-2"}},
		{name: "unknown pid", caller: bob, snap: box, pid: 31337,
			code: refusal.CodeNotFound, msg: []string{"pid 31337 is not on any GPU of gpu-01"}},
		{name: "over the maximum", caller: bob, snap: box, pid: 777, d: 8 * 24 * time.Hour,
			code: refusal.CodeInvalid, msg: []string{"over the interactive maximum"}},
		{name: "a note with a bidi override", caller: bob, snap: box, pid: 777, note: "a\u202eb",
			code: refusal.CodeInvalid, msg: []string{"note holds U+202E", "remove it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			l, err := tab.PlanAdopt(tt.caller, tt.pid, tt.d, tt.note, tt.snap, t0, p)
			if tt.code != "" {
				checkRefusal(t, err, tt.code, tt.msg...)
				return
			}
			if err != nil {
				t.Fatalf("PlanAdopt: %v", err)
			}
			if !slices.Equal(l.GPUs, tt.want) {
				t.Errorf("GPUs = %v, want %v", l.GPUs, tt.want)
			}
			if l.User != "bob" || l.UID != bob.UID {
				t.Errorf("lease is for %s (uid %d), want the pid's owner bob", l.User, l.UID)
			}
			if l.Token != 3 || l.ID != "gpu-01-3" {
				t.Errorf("token %d, id %s; want 3, gpu-01-3", l.Token, l.ID)
			}
			wantDur := tt.d
			if wantDur == 0 {
				wantDur = p.DefaultInteractive
			}
			if got := l.ExpiresAt.Sub(t0); got != wantDur {
				t.Errorf("adopted lease runs %s, want %s", got, wantDur)
			}
			wantNote := tt.note
			if wantNote == "" {
				wantNote = fmt.Sprintf("adopted pid %d", tt.pid)
			}
			if !strings.HasPrefix(l.Note, wantNote) {
				t.Errorf("note = %q, want it to start %q", l.Note, wantNote)
			}
		})
	}
}

// TestPlanAdoptHostileCommand: the note dibs writes for an adopted process
// names its command, which anyone can set; it is escaped and kept short, so
// the lease passes every check a peer makes (Lease.CheckText).
func TestPlanAdoptHostileCommand(t *testing.T) {
	for _, cmd := range []string{"\x1b]0;PWNED\x07\x1b[2J", "run\u202e" + strings.Repeat("x", 300)} {
		snap := withProc(islands(4, 4), 2, proc(4242, bob, cmd))
		l, err := table().PlanAdopt(bob, 4242, 0, "", snap, t0, lease.DefaultPolicy())
		if err != nil {
			t.Fatalf("PlanAdopt: %v", err)
		}
		if err := l.CheckText(); err != nil {
			t.Errorf("adopted lease does not pass CheckText: %v (note %q)", err, l.Note)
		}
		if len(l.Note) > words.MaxNoteLen {
			t.Errorf("note is %d bytes, over %d", len(l.Note), words.MaxNoteLen)
		}
		if !strings.HasPrefix(l.Note, `adopted pid 4242 (`) || !strings.Contains(l.Note, `\x1b]0;PWNED`) && !strings.Contains(l.Note, `run\u202exx`) {
			t.Errorf("note = %q, want the command escaped", l.Note)
		}
	}
}

// TestEachStringCoversEveryField fills every string field of a lease and a
// queue entry through reflection and checks EachString visits each one, so
// a field added later cannot slip past gossip's checks and the front ends'
// escaping.
func TestEachStringCoversEveryField(t *testing.T) {
	// A service's lease with a placement, so the strings behind the
	// pointers and slices count too.
	l := lease.Lease{Job: &job.Job{Command: []string{"a"}}, Containers: make([]string, 1), CPUs: make([]string, 1),
		Service: &service.Service{Spec: service.Spec{Place: &service.Placement{Tags: make([]string, 2)}}}}
	n := fillStrings(reflect.ValueOf(&l).Elem())
	seen := 0
	l.EachString(func(_ string, p *string) {
		if *p != "" {
			seen++
		}
	})
	if seen != n {
		t.Errorf("Lease.EachString visits %d of its %d string fields", seen, n)
	}
	e := queue.QueueEntry{Job: &job.Job{Command: []string{"a", "b"}}}
	n = fillStrings(reflect.ValueOf(&e).Elem())
	seen = 0
	e.EachString(func(_ string, p *string) {
		if *p != "" {
			seen++
		}
	})
	if seen != n {
		t.Errorf("QueueEntry.EachString visits %d of its %d string fields", seen, n)
	}
}

// fillStrings sets every string reachable from v (through structs,
// pointers and slices) to "x" and counts them.
func fillStrings(v reflect.Value) int {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
		return 1
	case reflect.Pointer:
		if v.IsNil() {
			return 0
		}
		return fillStrings(v.Elem())
	case reflect.Struct:
		n := 0
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				n += fillStrings(v.Field(i))
			}
		}
		return n
	case reflect.Slice:
		n := 0
		for i := range v.Len() {
			n += fillStrings(v.Index(i))
		}
		return n
	}
	return 0
}

func TestCheckText(t *testing.T) {
	ok := lease.Lease{ID: "n1-1", Node: "n1", User: "alice", Kind: lease.KindBatch, Note: "训练 🚀", Session: "dibs-n1-1"}
	if err := ok.CheckText(); err != nil {
		t.Errorf("plain lease refused: %v", err)
	}
	bad := ok
	bad.User = "al\x1b[2Jice"
	if err := bad.CheckText(); err == nil || !strings.Contains(err.Error(), "its user holds U+001B ESCAPE") {
		t.Errorf("CheckText = %v, want it to name the user and the ESC", err)
	}
	bad = ok
	bad.Note = "a\u2066b"
	if err := bad.CheckText(); err == nil || !strings.Contains(err.Error(), "its note holds U+2066") {
		t.Errorf("CheckText = %v, want it to name the note", err)
	}
	e := queue.QueueEntry{ID: "n1-q1", Origin: "n1", User: "bob", Job: &job.Job{Command: []string{"python", "-c", "import os\nprint(1)"}, Dir: "/home/bob"}}
	if err := e.CheckText(); err != nil {
		t.Errorf("entry with a multi-line command refused: %v", err)
	}
	e.Job.Name = "run\u200b"
	if err := e.CheckText(); err == nil || !strings.Contains(err.Error(), "its name holds U+200B") {
		t.Errorf("CheckText = %v, want the session name refused", err)
	}
}

func BenchmarkPlanClaim(b *testing.B) {
	snap := withProc(islands(4, 4), 6, proc(4242, bob, "python"))
	tab := table(held(1, alice, []int{0, 1}, t0, time.Hour), held(2, bob, []int{4}, t0, time.Hour))
	p := lease.DefaultPolicy()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := tab.PlanClaim(alice, lease.Claim{Count: 2}, snap, t0, p); err != nil {
			b.Fatal(err)
		}
	}
}
