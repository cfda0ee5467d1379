package smi

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/dibs-gpu/dibs/nodeprobe"
)

// maxSMIOutput bounds what the nvidia-smi parsers accept. Real output for 64
// GPUs with hundreds of processes is a few tens of KiB; anything this large
// is not nvidia-smi talking.
const maxSMIOutput = 1 << 20

// queryGPUFields is the --query-gpu column list; the parser depends on its
// order.
const queryGPUFields = "index,uuid,pci.bus_id,name,memory.total,memory.used,utilization.gpu,temperature.gpu,power.draw,power.limit,mig.mode.current,driver_version"

// queryAppsFields is the --query-compute-apps column list.
const queryAppsFields = "gpu_uuid,pid,process_name,used_memory"

const (
	queryGPUColumns  = 12
	queryAppsColumns = 4
)

// smiApp is one line of --query-compute-apps.
type smiApp struct {
	gpuUUID string
	pid     int
	name    string
	usedMiB uint64
}

// smiMIG is one MIG device line of `nvidia-smi -L`.
type smiMIG struct {
	gpuUUID string
	dev     nodeprobe.MIGDevice
}

// parseQueryGPU parses `nvidia-smi --query-gpu=<queryGPUFields>
// --format=csv,noheader,nounits`. It returns the GPUs in the order printed
// and the driver version. Unavailable values ("[N/A]", "[Not Supported]",
// "N/A", any other bracketed note) become unknown fields; anything else that
// does not parse is an error naming the line.
func parseQueryGPU(data []byte) ([]nodeprobe.GPU, string, error) {
	if len(data) > maxSMIOutput {
		return nil, "", fmt.Errorf("nvidia-smi --query-gpu: output of %d bytes exceeds %d", len(data), maxSMIOutput)
	}
	var gpus []nodeprobe.GPU
	driver := ""
	seen := make(map[int]bool)
	err := eachLine(data, func(n int, line string) error {
		f, err := splitCSVLine(line)
		if err != nil {
			return lineErr("--query-gpu", n, line, err)
		}
		if len(f) != queryGPUColumns {
			return lineErr("--query-gpu", n, line, fmt.Errorf("%d columns, want %d", len(f), queryGPUColumns))
		}
		g, drv, err := gpuFromFields(f)
		if err != nil {
			return lineErr("--query-gpu", n, line, err)
		}
		if seen[g.Index] {
			return lineErr("--query-gpu", n, line, fmt.Errorf("gpu index %d listed twice", g.Index))
		}
		seen[g.Index] = true
		if drv != "" {
			driver = drv
		}
		gpus = append(gpus, g)
		return nil
	})
	if err != nil {
		return nil, "", err
	}
	return gpus, driver, nil
}

func gpuFromFields(f []string) (nodeprobe.GPU, string, error) {
	var g nodeprobe.GPU
	var err error
	if g.Index, err = parseRequiredInt("index", f[0]); err != nil {
		return g, "", err
	}
	if g.UUID, err = parseRequiredWord("uuid", f[1]); err != nil {
		return g, "", err
	}
	if !unavailable(f[2]) {
		if g.PCIBusID, err = parseRequiredWord("pci.bus_id", f[2]); err != nil {
			return g, "", err
		}
	}
	if unavailable(f[3]) || f[3] == "" {
		return g, "", fmt.Errorf("name: missing")
	}
	if strings.ContainsFunc(f[3], func(r rune) bool { return r < ' ' || r == 0x7f || r == utf8.RuneError }) {
		return g, "", fmt.Errorf("name: %q has odd characters", f[3])
	}
	g.Model = f[3]
	if g.MemoryTotalMiB, err = parseMiB("memory.total", f[4]); err != nil {
		return g, "", err
	}
	if g.MemoryUsedMiB, err = parseMiB("memory.used", f[5]); err != nil {
		return g, "", err
	}
	if g.UtilizationPct, err = parseOptionalInt("utilization.gpu", f[6], 0, 100); err != nil {
		return g, "", err
	}
	if g.TemperatureC, err = parseOptionalInt("temperature.gpu", f[7], -273, 1000); err != nil {
		return g, "", err
	}
	if g.PowerDrawW, err = parseOptionalWatts("power.draw", f[8]); err != nil {
		return g, "", err
	}
	if g.PowerLimitW, err = parseOptionalWatts("power.limit", f[9]); err != nil {
		return g, "", err
	}
	switch {
	case unavailable(f[10]):
		g.MIG = nodeprobe.MIGUnsupported
	case strings.EqualFold(f[10], "Enabled"):
		g.MIG = nodeprobe.MIGEnabled
	case strings.EqualFold(f[10], "Disabled"):
		g.MIG = nodeprobe.MIGDisabled
	default:
		return g, "", fmt.Errorf("mig.mode.current: %q is not Enabled or Disabled", f[10])
	}
	driver := ""
	if !unavailable(f[11]) {
		if driver, err = parseRequiredWord("driver_version", f[11]); err != nil {
			return g, "", err
		}
	}
	g.Processes = []nodeprobe.Process{}
	return g, driver, nil
}

// parseComputeApps parses `nvidia-smi --query-compute-apps=<queryAppsFields>
// --format=csv,noheader,nounits`. A process name may hold commas (it is a
// path, printed unquoted), so the columns around it are fixed and the rest is
// the name.
func parseComputeApps(data []byte) ([]smiApp, error) {
	if len(data) > maxSMIOutput {
		return nil, fmt.Errorf("nvidia-smi --query-compute-apps: output of %d bytes exceeds %d", len(data), maxSMIOutput)
	}
	var apps []smiApp
	err := eachLine(data, func(n int, line string) error {
		if strings.EqualFold(line, "No running processes found") {
			return nil
		}
		f, err := splitCSVLine(line)
		if err != nil {
			return lineErr("--query-compute-apps", n, line, err)
		}
		if len(f) < queryAppsColumns {
			return lineErr("--query-compute-apps", n, line, fmt.Errorf("%d columns, want %d", len(f), queryAppsColumns))
		}
		var a smiApp
		if a.gpuUUID, err = parseRequiredWord("gpu_uuid", f[0]); err != nil {
			return lineErr("--query-compute-apps", n, line, err)
		}
		pid, err := parseRequiredInt("pid", f[1])
		if err == nil && pid == 0 {
			err = errors.New("pid: 0 is not a process")
		}
		if err != nil {
			return lineErr("--query-compute-apps", n, line, err)
		}
		a.pid = pid
		name := strings.Join(f[2:len(f)-1], ",")
		if !unavailable(name) {
			a.name = name
		}
		if a.usedMiB, err = parseMiB("used_memory", f[len(f)-1]); err != nil {
			return lineErr("--query-compute-apps", n, line, err)
		}
		apps = append(apps, a)
		return nil
	})
	if err != nil {
		return nil, err
	}
	return apps, nil
}

// parseListGPUs reads the MIG devices out of `nvidia-smi -L`:
//
//	GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-5c89852c-...)
//	  MIG 3g.40gb     Device  0: (UUID: MIG-c7384736-...)
//
// nvidia-smi has no query for MIG memory, so each device's total is the
// profile's nominal size ("40gb" = 40960 MiB) and its use is unknown (0).
func parseListGPUs(data []byte) ([]smiMIG, error) {
	if len(data) > maxSMIOutput {
		return nil, fmt.Errorf("nvidia-smi -L: output of %d bytes exceeds %d", len(data), maxSMIOutput)
	}
	var out []smiMIG
	parent := ""
	err := eachLine(data, func(n int, line string) error {
		switch {
		case strings.HasPrefix(line, "GPU "):
			u, err := listUUID(line)
			if err != nil {
				return lineErr("-L", n, line, err)
			}
			parent = u
		case strings.HasPrefix(line, "MIG "):
			if parent == "" {
				return lineErr("-L", n, line, errors.New("MIG device before any GPU"))
			}
			m, err := parseListMIG(line)
			if err != nil {
				return lineErr("-L", n, line, err)
			}
			out = append(out, smiMIG{gpuUUID: parent, dev: m})
		default:
			return lineErr("-L", n, line, errors.New("neither a GPU nor a MIG line"))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// parseListMIG parses "MIG 3g.40gb     Device  0: (UUID: MIG-...)".
func parseListMIG(line string) (nodeprobe.MIGDevice, error) {
	var m nodeprobe.MIGDevice
	head, _, ok := strings.Cut(line, ":")
	if !ok {
		return m, errors.New("no colon")
	}
	f := strings.Fields(head) // MIG 3g.40gb Device 0
	if len(f) != 4 || f[2] != "Device" {
		return m, fmt.Errorf("want \"MIG <profile> Device <n>:\", got %q", head)
	}
	idx, err := parseRequiredInt("mig device", f[3])
	if err != nil {
		return m, err
	}
	u, err := listUUID(line)
	if err != nil {
		return m, err
	}
	m.Index, m.UUID, m.Profile = idx, u, f[1]
	m.MemoryTotalMiB = profileMiB(f[1])
	return m, nil
}

// profileMiB is the nominal memory of a MIG profile name ("1g.10gb",
// "1c.3g.40gb", "1g.10gb+me"), 0 when the name does not say.
func profileMiB(profile string) uint64 {
	profile, _, _ = strings.Cut(profile, "+")
	i := strings.LastIndexByte(profile, '.')
	if i < 0 || !strings.HasSuffix(profile, "gb") {
		return 0
	}
	gb, err := strconv.ParseUint(profile[i+1:len(profile)-2], 10, 16)
	if err != nil {
		return 0
	}
	return gb * 1024
}

// listUUID extracts the id from "(UUID: X)".
func listUUID(line string) (string, error) {
	_, rest, ok := strings.Cut(line, "(UUID: ")
	if !ok {
		return "", errors.New("no (UUID: ...)")
	}
	u, _, ok := strings.Cut(rest, ")")
	if !ok {
		return "", errors.New("unterminated (UUID: ...)")
	}
	return parseRequiredWord("uuid", u)
}

// eachLine calls fn for every non-blank line, trimmed, numbered from 1.
func eachLine(data []byte, fn func(n int, line string) error) error {
	n := 0
	for len(data) > 0 {
		n++
		line := data
		if i := bytes.IndexByte(data, '\n'); i >= 0 {
			line, data = data[:i], data[i+1:]
		} else {
			data = nil
		}
		line = bytes.TrimSpace(line)
		if len(line) == 0 {
			continue
		}
		if err := fn(n, string(line)); err != nil {
			return err
		}
	}
	return nil
}

// lineErr names the command, the line and (a bounded piece of) its text.
func lineErr(cmd string, n int, line string, err error) error {
	const show = 80
	if len(line) > show {
		line = line[:show] + "..."
	}
	return fmt.Errorf("nvidia-smi %s line %d %q: %w", cmd, n, line, err)
}

// splitCSVLine splits one CSV line, trimming the spaces nvidia-smi puts after
// each comma. Fields may be double-quoted ("" escapes a quote), in which case
// commas inside them are kept.
func splitCSVLine(line string) ([]string, error) {
	fields := make([]string, 0, queryGPUColumns)
	i := 0
	for {
		for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
			i++
		}
		if i < len(line) && line[i] == '"' {
			var b strings.Builder
			i++
			for {
				if i >= len(line) {
					return nil, errors.New("unterminated quoted field")
				}
				c := line[i]
				i++
				if c == '"' {
					if i < len(line) && line[i] == '"' {
						b.WriteByte('"')
						i++
						continue
					}
					break
				}
				b.WriteByte(c)
			}
			for i < len(line) && (line[i] == ' ' || line[i] == '\t') {
				i++
			}
			fields = append(fields, b.String())
			if i == len(line) {
				return fields, nil
			}
			if line[i] != ',' {
				return nil, errors.New("text after a quoted field")
			}
			i++
			continue
		}
		j := strings.IndexByte(line[i:], ',')
		if j < 0 {
			fields = append(fields, strings.TrimSpace(line[i:]))
			return fields, nil
		}
		fields = append(fields, strings.TrimSpace(line[i:i+j]))
		i += j + 1
	}
}

// unavailable reports whether v is how nvidia-smi says "no value": "N/A" or
// a bracketed note such as "[N/A]", "[Not Supported]", "[Unknown Error]",
// "[Insufficient Permissions]".
func unavailable(v string) bool {
	if v == "N/A" {
		return true
	}
	if len(v) < 3 || v[0] != '[' || v[len(v)-1] != ']' {
		return false
	}
	for _, c := range v[1 : len(v)-1] {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c == ' ' || c == '/' || c == '-') {
			return false
		}
	}
	return true
}

func parseRequiredInt(name, v string) (int, error) {
	n, err := strconv.ParseUint(v, 10, 31)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a non-negative integer", name, v)
	}
	return int(n), nil
}

// parseRequiredWord accepts a non-empty value without spaces or controls.
func parseRequiredWord(name, v string) (string, error) {
	if v == "" || unavailable(v) {
		return "", fmt.Errorf("%s: missing", name)
	}
	for _, c := range v {
		if c <= ' ' || c == 0x7f || c == '"' || c == ',' {
			return "", fmt.Errorf("%s: %q has odd characters", name, v)
		}
	}
	return v, nil
}

// parseMiB parses a memory figure; unavailable reads as 0 because the
// snapshot's memory fields are not optional.
func parseMiB(name, v string) (uint64, error) {
	if unavailable(v) {
		return 0, nil
	}
	n, err := strconv.ParseUint(v, 10, 40)
	if err != nil {
		return 0, fmt.Errorf("%s: %q is not a MiB count", name, v)
	}
	return n, nil
}

func parseOptionalInt(name, v string, lo, hi int) (*int, error) {
	if unavailable(v) {
		return nil, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		return nil, fmt.Errorf("%s: %q is not an integer in [%d, %d]", name, v, lo, hi)
	}
	return nodeprobe.IntPtr(n), nil
}

func parseOptionalWatts(name, v string) (*float64, error) {
	if unavailable(v) {
		return nil, nil
	}
	w, err := strconv.ParseFloat(v, 64)
	if err != nil || math.IsNaN(w) || w < 0 || w > 1e6 {
		return nil, fmt.Errorf("%s: %q is not a wattage", name, v)
	}
	return nodeprobe.FloatPtr(w), nil
}
