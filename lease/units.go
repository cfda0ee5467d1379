package lease

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// A lease holds units of a node: whole GPUs (Lease.GPUs), or part of one
// GPU: one MIG instance (Lease.MIG) or a memory budget on a shared GPU
// (Lease.MemMiB). The rules for parts live here: who holds what on a GPU,
// how much room a shared GPU has left, which MIG instance a claim gets.

// Use is who holds one GPU now: a whole-GPU lease, or the MIG and shared
// leases on its parts (never both, by the rules below). The scheduler reads
// it too, to place MIG and shared runs.
type Use struct {
	// Whole is the lease holding the whole GPU, nil when none.
	Whole *Lease
	parts []*Lease
	// budget is the shared leases' budgets together.
	budget uint64
}

// first is the lease a message names for the GPU: the whole-GPU lease, or
// the oldest part.
func (u *Use) first() *Lease {
	if u == nil {
		return nil
	}
	if u.Whole != nil {
		return u.Whole
	}
	if len(u.parts) > 0 {
		return u.parts[0]
	}
	return nil
}

// MIG returns the lease holding MIG instance uuid, nil when none.
func (u *Use) MIG(uuid string) *Lease {
	if u == nil {
		return nil
	}
	for _, l := range u.parts {
		if l.MIG == uuid {
			return l
		}
	}
	return nil
}

// UsesOf maps GPU index to who holds it, from leases that hold now
// (bookings are left out: they hold nothing yet). Parts are in grant order.
func UsesOf(leases []*Lease) map[int]*Use {
	m := make(map[int]*Use)
	for _, l := range leases {
		if l.Booked {
			continue
		}
		for _, g := range l.GPUs {
			u := m[g]
			if u == nil {
				u = &Use{}
				m[g] = u
			}
			if !l.Partial() {
				u.Whole = l
				continue
			}
			u.parts = append(u.parts, l)
			u.budget += l.MemMiB
		}
	}
	for _, u := range m {
		slices.SortFunc(u.parts, func(a, b *Lease) int { return cmp.Compare(a.Token, b.Token) })
	}
	return m
}

// usesOfList is usesOf for a slice of leases.
func usesOfList(leases []Lease) map[int]*Use {
	ps := make([]*Lease, len(leases))
	for i := range leases {
		ps[i] = &leases[i]
	}
	return UsesOf(ps)
}

// uses is usesOf for the table's leases.
func (t *Table) uses() map[int]*Use {
	ps := make([]*Lease, 0, len(t.leases))
	for _, e := range t.leases {
		ps = append(ps, &e.Lease)
	}
	return UsesOf(ps)
}

// holdsProcess reports whether a process on a GPU belongs to one of the
// leases on it: a process NVML places on a MIG instance to the holder of
// that instance, any other to the holder of the GPU or of one of its parts.
func (u *Use) holdsProcess(pr nodeprobe.Process) bool {
	if u == nil {
		return false
	}
	if u.Whole != nil && ownedBy(pr, u.Whole) {
		return true
	}
	if pr.MIGDevice != "" {
		if l := u.MIG(pr.MIGDevice); l != nil {
			return ownedBy(pr, l)
		}
		return false
	}
	for _, l := range u.parts {
		if ownedBy(pr, l) {
			return true
		}
	}
	return false
}

// SharedRoom is how much memory of GPU g a new shared lease may take now:
// nothing when a whole-GPU lease holds it, it is split into MIG instances or
// it is down; otherwise its memory less the shared leases' budgets and the
// memory that processes of nobody holding it use (a hand-started server),
// and never more than the memory free right now (a holder over budget).
func SharedRoom(g *nodeprobe.GPU, u *Use) uint64 {
	if g.Error != "" || g.MIG == nodeprobe.MIGEnabled || g.MemoryTotalMiB == 0 {
		return 0
	}
	if u != nil && u.Whole != nil {
		return 0
	}
	var outside uint64
	for _, pr := range g.Processes {
		if !u.holdsProcess(pr) {
			outside += pr.UsedMemoryMiB
		}
	}
	var budget uint64
	if u != nil {
		budget = u.budget
	}
	room := sub(g.MemoryTotalMiB, budget+outside)
	return min(room, sub(g.MemoryTotalMiB, g.MemoryUsedMiB))
}

func sub(a, b uint64) uint64 {
	if b >= a {
		return 0
	}
	return a - b
}

// MatchModel reports whether a GPU's model contains want, ignoring case; ""
// matches every GPU (the rule queued requests have always used).
func MatchModel(g *nodeprobe.GPU, want string) bool {
	return want == "" || strings.Contains(strings.ToLower(g.Model), strings.ToLower(want))
}

// HasTags reports whether a node's tags hold every tag in want.
func HasTags(have, want []string) bool {
	for _, w := range want {
		if !slices.ContainsFunc(have, func(h string) bool { return strings.EqualFold(h, w) }) {
			return false
		}
	}
	return true
}

// Share is the part of a GPU of total MiB that part MiB counts for, kept
// within (0, 1].
func Share(part, total uint64) float64 {
	if total == 0 || part >= total {
		return 1
	}
	return max(math.Round(float64(part)/float64(total)*1e4)/1e4, 1e-4)
}

// ParseMem reads a memory size as a person types it: 20G, 20GB, 20GiB,
// 1.5T, 512M, 512MiB (G, GB and GiB all mean 1024 MiB, as nvidia-smi's
// figures do). It returns MiB.
func ParseMem(s string) (uint64, error) {
	in := strings.TrimSpace(s)
	bad := refusal.Invalidf("cannot read memory size %s: write it like 20G or 512M", words.QuoteInput(in))
	if in == "" {
		return 0, bad
	}
	num := strings.TrimRightFunc(in, func(r rune) bool { return r >= 'A' && r <= 'Z' || r >= 'a' && r <= 'z' })
	unit := strings.ToLower(strings.TrimSpace(in[len(num):]))
	var mult float64
	switch unit {
	case "m", "mb", "mib":
		mult = 1
	case "g", "gb", "gib", "":
		mult = 1024
	case "t", "tb", "tib":
		mult = 1024 * 1024
	default:
		return 0, bad
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, bad
	}
	mib := v * mult
	if mib < 1 {
		return 0, refusal.Invalidf("memory size %s is less than 1 MiB: ask for more, like 20G", words.QuoteInput(in))
	}
	if mib > words.MaxMemMiB {
		return 0, refusal.Invalidf("memory size %s is larger than any GPU", words.QuoteInput(in))
	}
	return uint64(math.Round(mib)), nil
}

// FormatMem prints MiB the way the board does: 20 GiB, 7.5 GiB, 512 MiB.
func FormatMem(mib uint64) string {
	switch {
	case mib < 1024:
		return strconv.FormatUint(mib, 10) + " MiB"
	case mib%1024 == 0:
		return strconv.FormatUint(mib/1024, 10) + " GiB"
	}
	return strconv.FormatFloat(float64(mib)/1024, 'f', 1, 64) + " GiB"
}

// migChoice is one MIG instance a claim could take.
type migChoice struct {
	gpu  *nodeprobe.GPU
	inst *nodeprobe.MIGDevice
}

// findMIG finds the free MIG instances that sel names: a profile (3g.40gb),
// a UUID (MIG-…) or GPU:INDEX (0:1). Instances held, with an unleased
// process on them (unless force), on a GPU that is down or of another model
// are not free; busy says why the named ones are not.
func findMIG(snap nodeprobe.Snapshot, uses map[int]*Use, sel, model string, force bool) (free []migChoice, busy []string) {
	gi, ii, byIndex := parseMIGIndex(sel)
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		if g.MIG != nodeprobe.MIGEnabled || !MatchModel(g, model) {
			continue
		}
		u := uses[g.Index]
		for k := range g.MIGDevices {
			d := &g.MIGDevices[k]
			switch {
			case byIndex && (g.Index != gi || d.Index != ii):
				continue
			case !byIndex && !strings.EqualFold(d.Profile, sel) && d.UUID != sel:
				continue
			}
			where := fmt.Sprintf("%s on GPU %d", d.Profile, g.Index)
			switch {
			case g.Error != "":
				busy = append(busy, where+" is down")
			case u.MIG(d.UUID) != nil:
				l := u.MIG(d.UUID)
				busy = append(busy, fmt.Sprintf("%s is held by %s (lease %s)", where, l.User, l.ID))
			case u != nil && u.Whole != nil:
				busy = append(busy, fmt.Sprintf("%s is in %s's lease %s of the whole GPU", where, u.Whole.User, u.Whole.ID))
			case !force && MIGBusy(g, d.UUID) != nil:
				pr := MIGBusy(g, d.UUID)
				busy = append(busy, fmt.Sprintf("%s has %s's process %d on it but no lease", where, ownerName(*pr), pr.PID))
			default:
				free = append(free, migChoice{gpu: g, inst: d})
			}
		}
	}
	return free, busy
}

// MIGBusy returns a process running on MIG instance uuid, nil when none.
func MIGBusy(g *nodeprobe.GPU, uuid string) *nodeprobe.Process {
	for i := range g.Processes {
		if g.Processes[i].MIGDevice == uuid {
			return &g.Processes[i]
		}
	}
	return nil
}

// parseMIGIndex reads GPU:INDEX ("0:1").
func parseMIGIndex(sel string) (gpu, inst int, ok bool) {
	a, b, found := strings.Cut(sel, ":")
	if !found {
		return 0, 0, false
	}
	g, err1 := strconv.Atoi(a)
	i, err2 := strconv.Atoi(b)
	return g, i, err1 == nil && err2 == nil && g >= 0 && i >= 0
}

// MIGProfiles lists the node's MIG profiles ("3g.40gb, 1g.10gb"), for a
// refusal that says what there is.
func MIGProfiles(snap nodeprobe.Snapshot) string {
	var ps []string
	for i := range snap.GPUs {
		for _, d := range snap.GPUs[i].MIGDevices {
			if !slices.Contains(ps, d.Profile) {
				ps = append(ps, d.Profile)
			}
		}
	}
	return strings.Join(ps, ", ")
}

// FreeMIG counts the MIG instances sel names that are free on a node, for
// placement across nodes.
func FreeMIG(snap nodeprobe.Snapshot, leases []Lease, sel, model string) int {
	free, _ := findMIG(snap, usesOfList(leases), sel, model, false)
	return len(free)
}

// BestSharedRoom is the most memory one new shared lease could get on one
// GPU of the node (matching model), and that GPU; -1 when none can take any.
func BestSharedRoom(snap nodeprobe.Snapshot, leases []Lease, model string) (uint64, int) {
	uses := usesOfList(leases)
	best, at := uint64(0), -1
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		if !MatchModel(g, model) {
			continue
		}
		if r := SharedRoom(g, uses[g.Index]); r > best {
			best, at = r, g.Index
		}
	}
	return best, at
}

// fitShared picks the GPU for a shared lease of mib: among those with room
// (and ok), the one it fills best (least room left), so large budgets still
// find a GPU; ties go to a GPU already shared, then the lowest index.
func fitShared(snap nodeprobe.Snapshot, uses map[int]*Use, mib uint64, ok func(g *nodeprobe.GPU) bool) (int, bool) {
	best, bestLeft, bestShared := -1, uint64(0), false
	for i := range snap.GPUs {
		g := &snap.GPUs[i]
		if !ok(g) {
			continue
		}
		u := uses[g.Index]
		room := SharedRoom(g, u)
		if room < mib {
			continue
		}
		left, shared := room-mib, u != nil && len(u.parts) > 0
		better := best < 0 || left < bestLeft || left == bestLeft && shared && !bestShared ||
			left == bestLeft && shared == bestShared && g.Index < best
		if better {
			best, bestLeft, bestShared = g.Index, left, shared
		}
	}
	return best, best >= 0
}

// ClaimWeight is how much of a quota a claim on a node with snap takes:
// its GPUs, or for a part of one its share of the GPU — a MIG instance of
// the profile asked for, a budget of the GPU named (or of the node's
// largest) — so quotas count GPUs fractionally, as Lease.Weight does once
// it is granted.
func ClaimWeight(snap nodeprobe.Snapshot, c Claim) float64 {
	switch {
	case c.MIG != "":
		for i := range snap.GPUs {
			g := &snap.GPUs[i]
			for _, d := range g.MIGDevices {
				if (strings.EqualFold(d.Profile, c.MIG) || d.UUID == c.MIG) && g.MemoryTotalMiB > 0 {
					return Share(d.MemoryTotalMiB, g.MemoryTotalMiB)
				}
			}
		}
		return 1
	case c.MemMiB > 0:
		var total uint64
		for i := range snap.GPUs {
			g := &snap.GPUs[i]
			if len(c.GPUs) == 1 && g.Index != c.GPUs[0] {
				continue
			}
			total = max(total, g.MemoryTotalMiB)
		}
		if total == 0 {
			return 1
		}
		return Share(c.MemMiB, total)
	}
	if c.Count > 0 {
		return float64(c.Count)
	}
	return float64(len(c.GPUs))
}

// HasMIG reports whether GPU g has a MIG instance sel names (a profile, a
// MIG- UUID or GPU:INDEX), free or not.
func HasMIG(g *nodeprobe.GPU, sel string) bool {
	if g.MIG != nodeprobe.MIGEnabled {
		return false
	}
	for k := range g.MIGDevices {
		if MIGNamed(g, &g.MIGDevices[k], sel) {
			return true
		}
	}
	return false
}

// MIGNamed reports whether sel (a profile, a MIG- UUID or GPU:INDEX) names
// instance d of GPU g.
func MIGNamed(g *nodeprobe.GPU, d *nodeprobe.MIGDevice, sel string) bool {
	if gi, ii, byIndex := parseMIGIndex(sel); byIndex {
		return g.Index == gi && d.Index == ii
	}
	return strings.EqualFold(d.Profile, sel) || d.UUID == sel
}

// FindGPU returns the GPU of snap with this index, nil when it has none.
func FindGPU(snap nodeprobe.Snapshot, index int) *nodeprobe.GPU {
	for i := range snap.GPUs {
		if snap.GPUs[i].Index == index {
			return &snap.GPUs[i]
		}
	}
	return nil
}
