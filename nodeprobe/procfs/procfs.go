// Package procfs attributes GPU processes to their owners from /proc and
// reads the host facts the probe backends share (CPUs, memory, host name).
// NVML and nvidia-smi give only a pid; dibs needs the user (to spot
// squatters) and the container (so a pid inside Docker still names a
// person's job).
package procfs

import (
	"bytes"
	"path/filepath"
	"strconv"
)

// Reader attributes GPU processes to their owners from procfs. It is not
// safe for concurrent use; each probe owns one.
type Reader struct {
	root  string
	users *Users
	// buf is reused for every small procfs file, so a probe does not allocate
	// per file read.
	buf [8192]byte
	// env holds a root container process's environment, which can be
	// longer than the other files (an image's ENV lines).
	env [32 << 10]byte
}

// NewReader reads the procfs mounted at root (normally /proc) and names
// owners through users.
func NewReader(root string, users *Users) *Reader {
	return &Reader{root: root, users: users}
}

// Owner is what /proc says about one process.
type Owner struct {
	UID       int
	User      string
	Command   string
	Container string
	// LeaseID is the DIBS_LEASE_ID in the environment of a root-owned
	// process in a container, empty for any other process: a rootful
	// runtime runs a container's processes as root, and this ties them to
	// the lease whose session started the container (docker run -e
	// DIBS_LEASE_ID). Other users' environments are not read.
	LeaseID string
}

// Attribute reads what /proc knows about pid. A process that has vanished (or
// that /proc hides) gives UID -1, no user and fallbackCmd as its command:
// never an error, because losing a process must not lose its GPU.
func (r *Reader) Attribute(pid int, fallbackCmd string) Owner {
	dir := filepath.Join(r.root, strconv.Itoa(pid))
	o := Owner{UID: -1, Command: fallbackCmd}
	if b, err := r.read(filepath.Join(dir, "status")); err == nil {
		if uid, ok := parseStatusUID(b); ok {
			o.UID = uid
			o.User = r.users.Name(uid)
		}
	}
	if b, err := r.read(filepath.Join(dir, "comm")); err == nil {
		if c := string(bytes.TrimSpace(b)); c != "" {
			o.Command = c
		}
	}
	if b, err := r.read(filepath.Join(dir, "cgroup")); err == nil {
		o.Container = containerID(b)
	}
	if o.UID == 0 && o.Container != "" {
		n, _ := readSmall(filepath.Join(dir, "environ"), r.env[:])
		o.LeaseID = leaseFromEnviron(r.env[:n])
	}
	return o
}

// leaseFromEnviron returns the value of DIBS_LEASE_ID in a NUL-separated
// /proc/PID/environ, empty when it is missing or is not a plausible lease
// id (printable ASCII, no spaces, at most 128 bytes): the process chose it.
// An environment longer than the buffer is cut; a variable cut short is
// not read.
func leaseFromEnviron(env []byte) string {
	const key = "DIBS_LEASE_ID="
	for len(env) > 0 {
		i := bytes.IndexByte(env, 0)
		if i < 0 {
			return "" // the last variable is cut short, or the file had no NUL
		}
		kv := env[:i]
		env = env[i+1:]
		if !bytes.HasPrefix(kv, []byte(key)) {
			continue
		}
		v := kv[len(key):]
		if len(v) == 0 || len(v) > 128 {
			return ""
		}
		for _, c := range v {
			if c <= ' ' || c >= 0x7f {
				return ""
			}
		}
		return string(v)
	}
	return ""
}

// read returns the start of a small procfs file in the shared buffer; the
// slice is valid until the next read.
func (r *Reader) read(path string) ([]byte, error) {
	n, err := readSmall(path, r.buf[:])
	if err != nil {
		return nil, err
	}
	return r.buf[:n], nil
}

// parseStatusUID returns the real uid from the "Uid:" line of
// /proc/PID/status ("Uid:\treal\teffective\tsaved\tfs").
func parseStatusUID(status []byte) (int, bool) {
	for len(status) > 0 {
		line := status
		if i := bytes.IndexByte(status, '\n'); i >= 0 {
			line, status = status[:i], status[i+1:]
		} else {
			status = nil
		}
		rest, ok := bytes.CutPrefix(line, []byte("Uid:"))
		if !ok {
			continue
		}
		rest = bytes.TrimLeft(rest, " \t")
		end := bytes.IndexAny(rest, " \t")
		if end < 0 {
			end = len(rest)
		}
		uid, err := strconv.Atoi(string(rest[:end]))
		if err != nil || uid < 0 {
			return 0, false
		}
		return uid, true
	}
	return 0, false
}

// containerIDLen is how long a container id is shown, as `docker ps` does.
const containerIDLen = 12

// containerID finds the container a process runs in from its
// /proc/PID/cgroup, returning the short id or "" on the host. It knows the
// cgroup paths Docker, Podman and containerd/CRI-O write under cgroup v1 and
// v2, with both the cgroupfs and the systemd drivers:
//
//	0::/system.slice/docker-<64hex>.scope
//	12:memory:/docker/<64hex>
//	0::/user.slice/.../libpod-<64hex>.scope
//	0::/kubepods.slice/.../cri-containerd-<64hex>.scope
//	11:cpu:/kubepods/burstable/pod<uid>/<64hex>
//	0::/.../kubepods-pod<uid>.slice:cri-containerd:<64hex>
func containerID(cgroup []byte) string {
	found := ""
	for len(cgroup) > 0 {
		line := cgroup
		if i := bytes.IndexByte(cgroup, '\n'); i >= 0 {
			line, cgroup = cgroup[:i], cgroup[i+1:]
		} else {
			cgroup = nil
		}
		// hierarchy-ID:controllers:path; the path may itself hold colons.
		i := bytes.IndexByte(line, ':')
		if i < 0 {
			continue
		}
		j := bytes.IndexByte(line[i+1:], ':')
		if j < 0 {
			continue
		}
		if id := containerIDFromPath(line[i+1+j+1:]); id != "" {
			found = id
			// cgroup v2's unified line is authoritative; v1 lines agree with
			// it, so the first hit is as good as any.
			break
		}
	}
	return found
}

// containerIDFromPath returns the short id of the deepest path segment that
// names a container.
func containerIDFromPath(path []byte) string {
	for len(path) > 0 {
		seg := path
		if i := bytes.LastIndexByte(path, '/'); i >= 0 {
			seg, path = path[i+1:], path[:i]
		} else {
			path = nil
		}
		seg = bytes.TrimSuffix(seg, []byte(".scope"))
		if i := bytes.LastIndexByte(seg, ':'); i >= 0 {
			seg = seg[i+1:] // systemd driver: "<slice>:cri-containerd:<id>"
		}
		if i := bytes.LastIndexByte(seg, '-'); i >= 0 {
			prefix := seg[:i]
			switch string(prefix) {
			case "docker", "libpod", "cri-containerd", "crio", "containerd", "cri-o":
				seg = seg[i+1:]
			default:
				continue // libpod-conmon-<id> is podman's monitor, not the container
			}
		}
		if isHex64(seg) {
			return string(seg[:containerIDLen])
		}
	}
	return ""
}

func isHex64(b []byte) bool {
	if len(b) != 64 {
		return false
	}
	for _, c := range b {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}
