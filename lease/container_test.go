package lease_test

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/job"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Container ids as nodeprobe reads them from a process's cgroup.
const (
	ctrA = "3f2a9c1b7d4e"
	ctrB = "9a8b7c6d5e4f"
	ctrC = "0123456789ab"
)

// inContainer is a process of uid c in container ctr, as a rootful runtime
// (c = root) or docker run --user (c = the user) starts it.
func inContainer(pid int, c lease.Caller, ctr string) nodeprobe.Process {
	pr := proc(pid, c, "python")
	pr.Container = ctr
	return pr
}

var rootProc = lease.Caller{UID: 0, User: "root"}

// TestPlanAdoptContainer: the holder of a lease takes a container on its
// GPUs; nobody can take one that also runs on a GPU they do not hold.
func TestPlanAdoptContainer(t *testing.T) {
	box := islands(4, 4)
	on := func(snap nodeprobe.Snapshot, gpu int, pr nodeprobe.Process) nodeprobe.Snapshot {
		return withProc(snap, gpu, pr)
	}
	a1 := held(1, alice, []int{0, 1}, t0, time.Hour)
	a2 := held(2, alice, []int{2}, t0, time.Hour)
	b3 := held(3, bob, []int{6}, t0, time.Hour)
	full := held(4, alice, []int{7}, t0, time.Hour)
	for i := range job.MaxContainers {
		full.Containers = append(full.Containers, strings.Repeat(string(rune('a'+i)), 12))
	}
	had := held(5, alice, []int{3}, t0, time.Hour)
	had.Containers = []string{ctrA}
	resv := held(6, alice, []int{4}, t0, time.Hour)
	resv.ReservedUntil = t0.Add(30 * time.Second)
	tab := table(a1, a2, b3, full, had, resv)

	tests := []struct {
		name   string
		caller lease.Caller
		snap   nodeprobe.Snapshot
		id     string
		want   map[string][]string // lease id -> its containers after
		code   refusal.Code
		msg    []string
	}{
		{name: "root's container on the holder's GPU", caller: alice, snap: on(box, 0, inContainer(10, rootProc, ctrB)), id: ctrB,
			want: map[string][]string{"gpu-01-1": {ctrB}}},
		{name: "the full id, in capitals", caller: alice, snap: on(box, 1, inContainer(10, rootProc, ctrB)), id: strings.ToUpper(ctrB) + strings.Repeat("F", 52),
			want: map[string][]string{"gpu-01-1": {ctrB}}},
		{name: "one container on two of the holder's leases", caller: alice, snap: on(on(box, 1, inContainer(10, rootProc, ctrB)), 2, inContainer(11, rootProc, ctrB)), id: ctrB,
			want: map[string][]string{"gpu-01-1": {ctrB}, "gpu-01-2": {ctrB}}},
		{name: "a lease that has it already: no change", caller: alice, snap: on(box, 3, inContainer(10, rootProc, ctrA)), id: ctrA,
			want: map[string][]string{"gpu-01-5": {ctrA}}},
		{name: "a second container beside the first", caller: alice, snap: on(box, 3, inContainer(10, rootProc, ctrB)), id: ctrB,
			want: map[string][]string{"gpu-01-5": {ctrA, ctrB}}},
		{name: "also on someone else's GPU", caller: alice, snap: on(on(box, 0, inContainer(10, rootProc, ctrB)), 6, inContainer(11, rootProc, ctrB)), id: ctrB,
			code: refusal.CodeForbidden, msg: []string{"container " + ctrB + " runs pid 11 on GPU 6 (held by bob), which you do not hold"}},
		{name: "also on a GPU nobody leased", caller: alice, snap: on(on(box, 0, inContainer(10, rootProc, ctrB)), 5, inContainer(11, rootProc, ctrB)), id: ctrB,
			code: refusal.CodeForbidden, msg: []string{"on GPU 5 (not leased), which you do not hold"}},
		{name: "only on someone else's GPU", caller: alice, snap: on(box, 6, inContainer(11, rootProc, ctrB)), id: ctrB,
			code: refusal.CodeForbidden, msg: []string{"GPU 6 (held by bob)"}},
		{name: "an admin holds no lease there", caller: root, snap: on(box, 0, inContainer(10, rootProc, ctrB)), id: ctrB,
			code: refusal.CodeForbidden, msg: []string{"GPU 0 (held by alice), which you do not hold"}},
		{name: "no process of it on any GPU", caller: alice, snap: on(box, 0, inContainer(10, rootProc, ctrB)), id: ctrC,
			code: refusal.CodeNotFound, msg: []string{"no process of container " + ctrC + " runs on a GPU of gpu-01", "dibs ls"}},
		{name: "a name, not an id", caller: alice, snap: box, id: "trainer",
			code: refusal.CodeInvalid, msg: []string{`"trainer" is not a container id`}},
		{name: "a lease at its most containers", caller: alice, snap: on(box, 7, inContainer(10, rootProc, ctrB)), id: ctrB,
			code: refusal.CodeInvalid, msg: []string{"lease gpu-01-4 has adopted 8 containers already"}},
		{name: "a gang reservation, not yet a lease", caller: alice, snap: on(box, 4, inContainer(10, rootProc, ctrB)), id: ctrB,
			code: refusal.CodeConflict, msg: []string{"gang reservation gpu-01-6"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tab.PlanAdoptContainer(tt.caller, tt.id, tt.snap)
			if tt.code != "" {
				checkRefusal(t, err, tt.code, tt.msg...)
				return
			}
			if err != nil {
				t.Fatalf("PlanAdoptContainer: %v", err)
			}
			if len(got) != len(tt.want) {
				t.Fatalf("changed %d leases, want %d: %+v", len(got), len(tt.want), got)
			}
			for _, l := range got {
				if w, ok := tt.want[l.ID]; !ok || !slices.Equal(l.Containers, w) {
					t.Errorf("lease %s adopts %v, want %v", l.ID, l.Containers, tt.want[l.ID])
				}
				if err := l.Validate(); err != nil {
					t.Errorf("lease %s as planned fails Validate: %v", l.ID, err)
				}
			}
		})
	}
	// Plan methods never mutate the table: nothing above was saved.
	for id, want := range map[string][]string{"gpu-01-1": nil, "gpu-01-2": nil, "gpu-01-5": {ctrA}} {
		if l, _ := tab.Get(id); !slices.Equal(l.Containers, want) {
			t.Errorf("after planning, the table's %s adopts %v, want %v", id, l.Containers, want)
		}
	}
}

// TestJudgeAdoptedContainer: root's processes of an adopted container, or
// of one started with the lease's DIBS_LEASE_ID, count as the holder's on
// that lease's GPUs and nowhere else; nobody else's process ever does.
func TestJudgeAdoptedContainer(t *testing.T) {
	a := held(1, alice, []int{0, 1}, t0, time.Hour)
	a.Containers = []string{ctrA}
	b := held(2, bob, []int{2}, t0, time.Hour)
	withLease := func(pr nodeprobe.Process, id string) nodeprobe.Process { pr.LeaseID = id; return pr }
	unknownRoot := inContainer(10, rootProc, ctrA)
	unknownRoot.UID = -1
	for _, tc := range []struct {
		name     string
		gpu      int
		p        nodeprobe.Process
		squatted bool
	}{
		{"root's process of the adopted container on the lease's GPU", 1, inContainer(10, rootProc, ctrA), false},
		{"the same, read without a uid", 1, unknownRoot, false},
		{"the adopted container on someone else's GPU", 2, inContainer(10, rootProc, ctrA), true},
		{"the adopted container on a GPU nobody holds", 3, inContainer(10, rootProc, ctrA), true},
		{"another user's process in the adopted container", 0, inContainer(10, bob, ctrA), true},
		{"root's process of a container not adopted", 0, inContainer(10, rootProc, ctrB), true},
		{"root's process on the host", 0, proc(10, rootProc, "nvidia-persistenced"), true},
		{"root's container with the lease's DIBS_LEASE_ID", 0, withLease(inContainer(10, rootProc, ctrB), "gpu-01-1"), false},
		{"DIBS_LEASE_ID of another lease", 0, withLease(inContainer(10, rootProc, ctrB), "gpu-01-2"), true},
		{"the lease's DIBS_LEASE_ID on someone else's GPU", 2, withLease(inContainer(10, rootProc, ctrB), "gpu-01-1"), true},
		{"DIBS_LEASE_ID on a host process", 0, withLease(proc(10, rootProc, "python"), "gpu-01-1"), true},
		{"DIBS_LEASE_ID in another user's container process", 0, withLease(inContainer(10, bob, ctrB), "gpu-01-1"), true},
	} {
		snap := withProc(islands(4), tc.gpu, tc.p)
		j := lease.Judge(snap, []lease.Lease{a, b}, nil, t0, lease.DefaultPolicy())[tc.gpu]
		if got := j.Has(lease.FlagSquatted); got != tc.squatted {
			t.Errorf("%s: squatted = %v, want %v (%+v)", tc.name, got, tc.squatted, j)
		}
	}
}

func TestLeaseValidateContainers(t *testing.T) {
	for _, tc := range []struct {
		name string
		ids  []string
		ok   bool
	}{
		{"none", nil, true},
		{"one", []string{ctrA}, true},
		{"the most", []string{"aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc", "dddddddddddd", "eeeeeeeeeeee", "ffffffffffff", "000000000000", "111111111111"}, true},
		{"one over the most", []string{"aaaaaaaaaaaa", "bbbbbbbbbbbb", "cccccccccccc", "dddddddddddd", "eeeeeeeeeeee", "ffffffffffff", "000000000000", "111111111111", "222222222222"}, false},
		{"twice", []string{ctrA, ctrA}, false},
		{"a full id", []string{ctrA + strings.Repeat("0", 52)}, false},
		{"capitals", []string{strings.ToUpper(ctrA)}, false},
		{"a name", []string{"trainer"}, false},
		{"an escape", []string{"\x1b[2J3f2a9c1b"}, false},
	} {
		l := held(1, alice, []int{0}, t0, time.Hour)
		l.Containers = tc.ids
		if err := l.Validate(); (err == nil) != tc.ok {
			t.Errorf("%s: Validate = %v, want ok %v", tc.name, err, tc.ok)
		}
	}
}

// TestPlanAdoptRootContainerPIDPointsAtContainer: `dibs adopt PID` of
// root's process in a container cannot make it a lease of the caller's, and
// says how to own it instead.
func TestPlanAdoptRootContainerPIDPointsAtContainer(t *testing.T) {
	snap := withProc(islands(4), 0, inContainer(4242, rootProc, ctrA))
	_, err := table(held(1, alice, []int{0}, t0, time.Hour)).PlanAdopt(alice, 4242, 0, "", snap, t0, lease.DefaultPolicy())
	checkRefusal(t, err, refusal.CodeForbidden, "pid 4242 is root's, in container "+ctrA, "dibs adopt --container "+ctrA)
}
