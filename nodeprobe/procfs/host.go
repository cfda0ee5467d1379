package procfs

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// ReadHost gathers the host facts that do not change while the agent runs,
// so backends read them once at open instead of at every probe. A fact that
// cannot be read is logged and left zero: a node without /proc/meminfo still
// has GPUs worth sharing. opts must have its defaults filled
// (nodeprobe.Options.WithDefaults).
func ReadHost(opts nodeprobe.Options, backend nodeprobe.Backend) nodeprobe.Host {
	h := nodeprobe.Host{Name: opts.HostName, CPUs: runtime.NumCPU(), Backend: backend}
	if h.Name == "" {
		name, err := os.Hostname()
		if err != nil {
			opts.Logf("nodeprobe: host name: %v", err)
		}
		h.Name = name
	}
	mem, err := readMemTotalMiB(filepath.Join(opts.ProcRoot, "meminfo"))
	if err != nil {
		opts.Logf("nodeprobe: host memory: %v", err)
	}
	h.MemoryMiB = mem
	return h
}

// readMemTotalMiB reads the MemTotal line of a meminfo file.
func readMemTotalMiB(path string) (uint64, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		rest, ok := bytes.CutPrefix(sc.Bytes(), []byte("MemTotal:"))
		if !ok {
			continue
		}
		f := bytes.Fields(rest)
		if len(f) != 2 || string(f[1]) != "kB" {
			return 0, fmt.Errorf("parse %s: odd MemTotal line %q", path, sc.Bytes())
		}
		kb, err := strconv.ParseUint(string(f[0]), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse %s: MemTotal: %w", path, err)
		}
		return kb / 1024, nil
	}
	return 0, fmt.Errorf("parse %s: no MemTotal line", path)
}
