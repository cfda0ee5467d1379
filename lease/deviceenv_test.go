package lease_test

import (
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

func TestDeviceEnvNamesTheLeasesGPUsByUUID(t *testing.T) {
	snap := nodeprobe.Snapshot{GPUs: []nodeprobe.GPU{{Index: 0, UUID: "GPU-a"}, {Index: 1, UUID: "GPU-b"}, {Index: 2, UUID: "GPU-c"}, {Index: 3}}}
	for _, tc := range []struct {
		name string
		l    lease.Lease
		want string
	}{
		{"whole GPUs, in the lease's order", lease.Lease{GPUs: []int{2, 0}}, "GPU-c,GPU-a"},
		{"a MIG instance by its own UUID", lease.Lease{GPUs: []int{1}, MIG: "MIG-x"}, "MIG-x"},
		{"a GPU whose UUID is unknown: none rather than too few", lease.Lease{GPUs: []int{0, 3}}, ""},
		{"a GPU not in the snapshot", lease.Lease{GPUs: []int{7}}, ""},
	} {
		env := tc.l.DeviceEnv(snap)
		if env["DIBS_GPU_UUIDS"] != tc.want || env["NVIDIA_VISIBLE_DEVICES"] != tc.want {
			t.Errorf("%s: %v, want both %q", tc.name, env, tc.want)
		}
	}
}

func TestLogNameIsUniquePerRunAndATmuxName(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	a := lease.Lease{Session: "dibs-node01-1", StartedAt: at}
	b := lease.Lease{Session: "dibs-node01-1", StartedAt: at.Add(time.Millisecond)}
	if a.LogName() == b.LogName() || !strings.HasPrefix(a.LogName(), "dibs-node01-1-") {
		t.Errorf("two runs of one session name: %q and %q", a.LogName(), b.LogName())
	}
	long := lease.Lease{Session: strings.Repeat("x", 128), StartedAt: at}
	if n := len(long.LogName()); n != 128 {
		t.Errorf("a 128-byte session's log name is %d bytes, want 128", n)
	}
}

// TestContainerProcessesOnTheBoard: what the user guide says of containers
// on a leased GPU. A container's process that runs as the holder (rootless
// podman, apptainer, docker run --user) is theirs; one that runs as root
// (rootful docker's default) is flagged like anyone else's, container or
// not.
func TestContainerProcessesOnTheBoard(t *testing.T) {
	now := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	l := lease.Lease{ID: "node01-1", Node: "node01", GPUs: []int{0}, User: "ana", UID: 1000, Token: 1,
		Kind: lease.KindBatch, StartedAt: now.Add(-time.Hour), ExpiresAt: now.Add(time.Hour)}
	for _, tc := range []struct {
		name     string
		p        nodeprobe.Process
		squatted bool
	}{
		{"rootless podman: the holder's uid", nodeprobe.Process{PID: 10, UID: 1000, User: "ana", Command: "python", Container: "3f2a9c1b7d4e"}, false},
		{"docker run --user the holder", nodeprobe.Process{PID: 11, UID: 1000, User: "ana", Command: "python", Container: "9a8b7c6d5e4f"}, false},
		{"rootful docker: root", nodeprobe.Process{PID: 12, UID: 0, User: "root", Command: "python", Container: "9a8b7c6d5e4f"}, true},
	} {
		snap := nodeprobe.Snapshot{GPUs: []nodeprobe.GPU{{Index: 0, UUID: "GPU-a", Processes: []nodeprobe.Process{tc.p}}}}
		j := lease.Judge(snap, []lease.Lease{l}, nil, now, lease.DefaultPolicy())[0]
		if got := j.Has(lease.FlagSquatted); got != tc.squatted {
			t.Errorf("%s: squatted = %v, want %v (%+v)", tc.name, got, tc.squatted, j)
		}
	}
}
