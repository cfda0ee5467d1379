package nodeprobe

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// MaxCPU bounds a CPU number in a list: above any machine dibs runs on
// (the kernel's own default NR_CPUS is 8192), small enough that a list
// from outside (gossip, a load file) cannot make anyone allocate without
// limit.
const MaxCPU = 8191

// ParseCPUList reads a set of logical CPUs as Linux writes it ("0-3,8,10-11":
// sysfs local_cpulist, Cpus_allowed_list in /proc/PID/status, taskset -c,
// docker --cpuset-cpus), sorted and without repeats. The empty list is the
// empty set. A GPU's local cores, a lease's chosen ones and a session's
// affinity all travel in this one form, which people can read and pass on.
func ParseCPUList(s string) ([]int, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	var out []int
	for part := range strings.SplitSeq(s, ",") {
		part = strings.TrimSpace(part)
		lo, hi, isRange := strings.Cut(part, "-")
		a, err := cpuNumber(lo)
		if err != nil {
			return nil, fmt.Errorf("CPU list %q: %w", s, err)
		}
		b := a
		if isRange {
			if b, err = cpuNumber(hi); err != nil {
				return nil, fmt.Errorf("CPU list %q: %w", s, err)
			}
			if b < a {
				return nil, fmt.Errorf("CPU list %q: range %s runs backwards", s, part)
			}
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
		if len(out) > MaxCPU+1 {
			return nil, fmt.Errorf("CPU list %q names more than %d CPUs", s, MaxCPU+1)
		}
	}
	slices.Sort(out)
	return slices.Compact(out), nil
}

// cpuNumber reads one CPU number of a list.
func cpuNumber(s string) (int, error) {
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil || n < 0 {
		return 0, fmt.Errorf("%q is not a CPU number (want a list such as 0-3,8)", s)
	}
	if n > MaxCPU {
		return 0, fmt.Errorf("CPU %d is above %d", n, MaxCPU)
	}
	return n, nil
}

// FormatCPUList writes cpus in the kernel's form, ranges joined ("0-3,8"),
// sorted; repeats are dropped. It is ParseCPUList's inverse.
func FormatCPUList(cpus []int) string {
	c := slices.Clone(cpus)
	slices.Sort(c)
	c = slices.Compact(c)
	var b strings.Builder
	for i := 0; i < len(c); {
		j := i
		for j+1 < len(c) && c[j+1] == c[j]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.Itoa(c[i]))
		if j > i {
			b.WriteByte('-')
			b.WriteString(strconv.Itoa(c[j]))
		}
		i = j + 1
	}
	return b.String()
}

// CleanCPUList is s parsed and written again in the kernel's form, or ""
// when s is not a CPU list: what a backend stores for a GPU's local cores,
// so every list that travels is one any reader parses.
func CleanCPUList(s string) string {
	c, err := ParseCPUList(s)
	if err != nil {
		return ""
	}
	return FormatCPUList(c)
}
