package procfs

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

const (
	hexID1 = "3f4e5a6b7c8d9e0f1a2b3c4d5e6f708192a3b4c5d6e7f8091a2b3c4d5e6f7081"
	hexID2 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
)

func TestContainerID(t *testing.T) {
	tests := []struct {
		name   string
		cgroup string
		want   string
	}{
		{"host v2", "0::/user.slice/user-1000.slice/session-2.scope\n", ""},
		{"host v1", "12:memory:/user.slice\n1:name=systemd:/user.slice/user-1000.slice/session-2.scope\n", ""},
		{"docker systemd v2", "0::/system.slice/docker-" + hexID1 + ".scope\n", hexID1[:12]},
		{"docker cgroupfs v1", "12:memory:/docker/" + hexID1 + "\n11:cpu:/docker/" + hexID1 + "\n", hexID1[:12]},
		{"podman rootless", "0::/user.slice/user-1000.slice/user@1000.service/user.slice/libpod-" + hexID2 + ".scope/container\n", hexID2[:12]},
		{"podman conmon is not the container", "0::/machine.slice/libpod-conmon-" + hexID2 + ".scope\n", ""},
		{"containerd systemd v2", "0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod12345678_1234_1234_1234_123456789abc.slice/cri-containerd-" + hexID2 + ".scope\n", hexID2[:12]},
		{"kubepods cgroupfs v1", "11:cpu:/kubepods/burstable/pod1c2d3e4f-aaaa-bbbb-cccc-123456789abc/" + hexID2 + "\n", hexID2[:12]},
		{"containerd systemd colon form", "0::/system.slice/containerd.service/kubepods-pod1.slice:cri-containerd:" + hexID1 + "\n", hexID1[:12]},
		{"crio", "0::/kubepods.slice/crio-" + hexID1 + ".scope\n", hexID1[:12]},
		{"short hex is not an id", "0::/docker/abcdef\n", ""},
		{"uppercase hex is not an id", "0::/docker/" + "3F4E5A6B7C8D9E0F1A2B3C4D5E6F708192A3B4C5D6E7F8091A2B3C4D5E6F7081" + "\n", ""},
		{"garbage", "no colons here\n::\n", ""},
		{"empty", "", ""},
		{"no trailing newline", "0::/docker/" + hexID1, hexID1[:12]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := containerID([]byte(tt.cgroup)); got != tt.want {
				t.Errorf("containerID(%q) = %q, want %q", tt.cgroup, got, tt.want)
			}
		})
	}
}

func TestParseStatusUID(t *testing.T) {
	tests := []struct {
		name   string
		status string
		want   int
		wantOK bool
	}{
		{"tabs", "Name:\tx\nUid:\t1001\t1002\t1003\t1004\nGid:\t1\t1\t1\t1\n", 1001, true},
		{"spaces", "Uid: 0 0 0 0", 0, true},
		{"missing", "Name:\tx\nGid:\t1\t1\t1\t1\n", 0, false},
		{"garbage", "Uid:\tbob\n", 0, false},
		{"negative", "Uid:\t-4\n", 0, false},
		{"empty", "", 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := parseStatusUID([]byte(tt.status))
			if got != tt.want || ok != tt.wantOK {
				t.Errorf("parseStatusUID = %d, %v; want %d, %v", got, ok, tt.want, tt.wantOK)
			}
		})
	}
}

func TestAttributeFakeProc(t *testing.T) {
	root := filepath.Join("testdata", "proc")
	var lookups int
	r := NewReader(root, NewFakeUsers(time.Now, map[int]string{0: "root", 1001: "alice"}, &lookups))
	tests := []struct {
		name     string
		pid      int
		fallback string
		want     Owner
	}{
		{"host process", 4242, "", Owner{UID: 1001, User: "alice", Command: "python3"}},
		{"docker", 4243, "", Owner{UID: 1001, User: "alice", Command: "python3", Container: hexID1[:12]}},
		{"kubernetes, uid without account", 5151, "", Owner{UID: 1002, User: "", Command: "python", Container: hexID2[:12]}},
		{"podman as root, started with -e DIBS_LEASE_ID", 7001, "", Owner{UID: 0, User: "root", Command: "python", Container: "aabbccddeeff", LeaseID: "node01-7"}},
		{"a user's container: its environment is not read", 4243, "", Owner{UID: 1001, User: "alice", Command: "python3", Container: hexID1[:12]}},
		{"root on the host: its environment is not read", 7013, "", Owner{UID: 0, User: "root", Command: "python"}},
		{"vanished pid keeps the fallback name", 99999, "python3.11", Owner{UID: -1, Command: "python3.11"}},
		{"vanished pid without a name", 99998, "", Owner{UID: -1}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := r.Attribute(tt.pid, tt.fallback); got != tt.want {
				t.Errorf("Attribute(%d) = %+v, want %+v", tt.pid, got, tt.want)
			}
		})
	}
	// 1001 was looked up once although two processes belong to it.
	if lookups != 3 {
		t.Errorf("user lookups = %d, want 3 (1001, 1002, 0 once each)", lookups)
	}
}

func TestLeaseFromEnviron(t *testing.T) {
	for _, tc := range []struct {
		name, env, want string
	}{
		{"among others", "PATH=/bin\x00DIBS_LEASE_ID=node01-7\x00HOME=/root\x00", "node01-7"},
		{"the last one", "PATH=/bin\x00DIBS_LEASE_ID=n2-14\x00", "n2-14"},
		{"absent", "PATH=/bin\x00DIBS_LEASE_IDX=node01-7\x00", ""},
		{"only the id variable, not the token", "DIBS_LEASE_TOKEN=7\x00", ""},
		{"empty", "DIBS_LEASE_ID=\x00", ""},
		{"cut short by the buffer", "PATH=/bin\x00DIBS_LEASE_ID=node01-7", ""},
		{"an escape", "DIBS_LEASE_ID=node01-7\x1b[2J\x00", ""},
		{"a space", "DIBS_LEASE_ID=node01 7\x00", ""},
		{"too long", "DIBS_LEASE_ID=" + strings.Repeat("x", 129) + "\x00", ""},
		{"no environment", "", ""},
	} {
		if got := leaseFromEnviron([]byte(tc.env)); got != tc.want {
			t.Errorf("%s: leaseFromEnviron(%q) = %q, want %q", tc.name, tc.env, got, tc.want)
		}
	}
}

func TestAttributePartialProc(t *testing.T) {
	// hidepid or a racing exit can leave some files readable and not others.
	root := t.TempDir()
	dir := filepath.Join(root, "77")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "comm"), []byte("torchrun\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r := NewReader(root, NewUsers(time.Now))
	got := r.Attribute(77, "ignored")
	want := Owner{UID: -1, Command: "torchrun"}
	if got != want {
		t.Errorf("Attribute = %+v, want %+v", got, want)
	}
}

func TestUserCacheRetriesUnknownAfterTTL(t *testing.T) {
	now := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	names := map[int]string{}
	var lookups int
	c := NewFakeUsers(func() time.Time { return now }, names, &lookups)

	if got := c.Name(1500); got != "" {
		t.Fatalf("Name(1500) = %q before the account exists, want empty", got)
	}
	names[1500] = "newhire"
	if got := c.Name(1500); got != "" {
		t.Errorf("Name(1500) within the TTL = %q, want the cached empty answer", got)
	}
	now = now.Add(negativeUserTTL + time.Second)
	if got := c.Name(1500); got != "newhire" {
		t.Errorf("Name(1500) after the TTL = %q, want newhire", got)
	}
	if got := c.UID("newhire"); got != 1500 {
		t.Errorf("UID(newhire) = %d, want 1500", got)
	}
	if got := c.UID("ghost"); got != -1 {
		t.Errorf("UID(ghost) = %d, want -1", got)
	}
	before := lookups
	c.Name(1500)
	c.UID("newhire")
	c.UID("ghost")
	if lookups != before {
		t.Errorf("cached answers cost %d lookups, want 0", lookups-before)
	}
}

func TestReadMemTotal(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		name    string
		content string
		want    uint64
		wantErr bool
	}{
		{"normal", "MemTotal:       16318740 kB\nMemFree: 1 kB\n", 15936, false},
		{"missing", "MemFree: 1 kB\n", 0, true},
		{"odd unit", "MemTotal: 12 MB\n", 0, true},
		{"not a number", "MemTotal: x kB\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, tt.name)
			if err := os.WriteFile(p, []byte(tt.content), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := readMemTotalMiB(p)
			if got != tt.want || (err != nil) != tt.wantErr {
				t.Errorf("readMemTotalMiB = %d, %v; want %d, error %v", got, err, tt.want, tt.wantErr)
			}
		})
	}
	if _, err := readMemTotalMiB(filepath.Join(dir, "absent")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("absent meminfo: err = %v, want ErrNotExist", err)
	}
}

func TestReadHostFakeProc(t *testing.T) {
	var logs []string
	opts := nodeprobe.Options{HostName: "node07", ProcRoot: filepath.Join("testdata", "proc"),
		Logf: func(f string, a ...any) { logs = append(logs, f) }}.WithDefaults()
	h := ReadHost(opts, nodeprobe.BackendNVML)
	if h.Name != "node07" || h.MemoryMiB != 2113459916/1024 || h.CPUs < 1 || h.Backend != nodeprobe.BackendNVML {
		t.Errorf("ReadHost = %+v, want node07 with %d MiB via nvml", h, 2113459916/1024)
	}
	if len(logs) != 0 {
		t.Errorf("ReadHost logged %q, want nothing", logs)
	}
}
