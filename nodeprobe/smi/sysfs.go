package smi

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// pciLocality is what sysfs says of a PCI device's place on the board:
// its local CPUs (a Linux CPU list, "" unknown) and NUMA node (-1 unknown).
type pciLocality struct {
	cpus string
	numa int
}

// addLocality sets g's local CPUs and NUMA node from sysfs, which
// nvidia-smi's CSV does not give (its `topo -m` prints them only as a
// table for people). They are read once per bus id: the board fixes them.
func (p *smiProbe) addLocality(g *nodeprobe.GPU) {
	id := sysfsBusID(g.PCIBusID)
	if id == "" {
		return
	}
	loc, ok := p.local[id]
	if !ok {
		loc = p.readLocality(id)
		p.local[id] = loc
	}
	g.CPUs = loc.cpus
	if loc.numa >= 0 {
		n := loc.numa
		g.NUMANode = &n
	}
}

// readLocality reads local_cpulist and numa_node of PCI device id. A file
// that is missing (no sysfs in a container) says nothing; one that cannot
// be read or parsed is logged once. numa_node is -1 on a machine of one
// node, which is unknown too.
func (p *smiProbe) readLocality(id string) pciLocality {
	dir := filepath.Join(p.sysRoot, "bus", "pci", "devices", id)
	loc := pciLocality{numa: -1}
	if b, err := readSmall(filepath.Join(dir, "local_cpulist")); err == nil {
		c, err := nodeprobe.ParseCPUList(string(b))
		if err != nil {
			p.warn.Warn("cpus/"+id, "nodeprobe: gpu %s: local CPUs unknown: %v", id, err)
		}
		loc.cpus = nodeprobe.FormatCPUList(c)
	} else if !errors.Is(err, fs.ErrNotExist) {
		p.warn.Warn("cpus/"+id, "nodeprobe: gpu %s: local CPUs unknown: %v", id, err)
	}
	if b, err := readSmall(filepath.Join(dir, "numa_node")); err == nil {
		if n, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && n >= 0 {
			loc.numa = n
		}
	}
	return loc
}

// readSmall reads a sysfs attribute: a page at most.
func readSmall(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b := make([]byte, 4096)
	n, err := f.Read(b)
	if n > 0 {
		return b[:n], nil
	}
	return nil, err
}

// sysfsBusID turns nvidia-smi's PCI bus id ("00000000:1B:00.0", an 8-digit
// domain, upper case) into sysfs's name for the device ("0000:1b:00.0");
// "" when it is not one.
func sysfsBusID(id string) string {
	dom, rest, ok := strings.Cut(strings.ToLower(strings.TrimSpace(id)), ":")
	if !ok || len(dom) < 4 || strings.Count(rest, ":") != 1 || strings.ContainsAny(rest, "/") {
		return ""
	}
	if strings.TrimLeft(dom[:len(dom)-4], "0") != "" {
		return ""
	}
	return dom[len(dom)-4:] + ":" + rest
}
