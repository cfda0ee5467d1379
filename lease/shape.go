package lease

import (
	"fmt"
	"strings"
	"time"
	"unicode/utf8"
)

// Bounds on what a lease, a queue entry or a request may hold: wherever one
// comes from (a person, the store, another agent), it is checked against
// the same limits before anything acts on it.
const (
	MaxGPUIndex    = 1024
	MaxGPUsPerNode = 1024
	MaxGangNodes   = 256
	MaxCommandArgs = 256
	MaxCommandSize = 64 << 10
	MaxPathLen     = 4096
	MaxNameLen     = 128
	MaxUserNameLen = 64
	MaxModelLen    = 64
	MaxRestarts    = 100
	// MaxMemMiB bounds a memory budget: 64 TiB, far over any GPU.
	MaxMemMiB = 64 << 20
	// MaxTags bounds the tags a node or a request carries.
	MaxTags = 32
)

// ValidNodeName accepts names that are safe in lease ids, tmux session
// names, DNS and the board: letters, digits, '-', '_' and '.', 1 to 63 of
// them, not starting with '-' or '.'.
func ValidNodeName(s string) error {
	if s == "" || len(s) > 63 {
		return fmt.Errorf("node name %q must be 1 to 63 characters", QuoteInput(s))
	}
	if s[0] == '-' || s[0] == '.' {
		return fmt.Errorf("node name %s must not start with '-' or '.'", QuoteInput(s))
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return fmt.Errorf("node name %s may hold only letters, digits, '-', '_' and '.'", QuoteInput(s))
		}
	}
	return nil
}

// ValidUserName accepts account names as useradd makes them (and as they
// cross nodes): letters, digits, '.', '_', '-', a trailing '$', not starting
// with '-', at most 64 bytes.
func ValidUserName(s string) bool {
	if s == "" || len(s) > MaxUserNameLen || s[0] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9', c == '.', c == '_', c == '-':
		case c == '$' && i == len(s)-1:
		default:
			return false
		}
	}
	return true
}

// ValidToken reports whether s is a short printable ASCII word without
// spaces: the shape of an id, a reason or a URL wherever one is checked.
func ValidToken(s string, max int) bool {
	if s == "" || len(s) > max {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] <= ' ' || s[i] >= 0x7f {
			return false
		}
	}
	return true
}

// Validate checks a lease's shape (not the rules: who may hold it is the
// table's business): ids, GPUs, names, sizes, the note.
func (l *Lease) Validate() error {
	if !ValidToken(l.ID, 2*MaxNameLen) {
		return Invalidf("a lease has a bad id %s", QuoteInput(l.ID))
	}
	if node, ok := NodeOfID(l.ID); !ok || node != l.Node {
		return Invalidf("lease %s does not belong to node %s", QuoteInput(l.ID), QuoteInput(l.Node))
	}
	if err := checkGPUs(l.GPUs, true); err != nil {
		return Wrapf(CodeInvalid, err, "lease %s: %v", l.ID, err)
	}
	if !ValidUserName(l.User) && l.User != "" {
		return Invalidf("lease %s has a bad user %s", l.ID, QuoteInput(l.User))
	}
	if l.Kind != "" {
		if _, err := ParseKind(string(l.Kind)); err != nil {
			return Wrapf(CodeInvalid, err, "lease %s: %v", l.ID, err)
		}
	}
	if l.Session != "" && !ValidToken(l.Session, MaxNameLen) {
		return Invalidf("lease %s has a bad session name %s", l.ID, QuoteInput(l.Session))
	}
	for _, s := range []string{l.Entry, l.Gang, l.PreemptReason, l.RequestID} {
		if s != "" && !ValidToken(s, 2*MaxNameLen) {
			return Invalidf("lease %s has a bad field %s", l.ID, QuoteInput(s))
		}
	}
	if err := CheckNote(l.Note); err != nil {
		return Wrapf(CodeInvalid, err, "lease %s: %v", l.ID, err)
	}
	if err := l.checkCPUs(); err != nil {
		return err
	}
	if err := l.CheckText(); err != nil {
		return Wrapf(CodeInvalid, err, "lease %s: %v", l.ID, err)
	}
	return l.validateParts()
}

// validateParts checks what the MIG, shared and booking fields may hold: a
// MIG or shared lease is on exactly one GPU and counts for a share of it,
// and only a booking carries a job.
func (l *Lease) validateParts() error {
	if l.MIG != "" && (!ValidToken(l.MIG, MaxNameLen) || !strings.HasPrefix(l.MIG, "MIG-")) {
		return Invalidf("lease %s names a bad MIG instance %s", l.ID, QuoteInput(l.MIG))
	}
	switch {
	case l.MIG != "" && l.MemMiB > 0:
		return Invalidf("lease %s holds both a MIG instance and a memory budget", l.ID)
	case l.Partial() && len(l.GPUs) != 1:
		return Invalidf("lease %s holds part of %d GPUs; a MIG or shared lease is on one", l.ID, len(l.GPUs))
	case l.Partial() && !(l.Share > 0 && l.Share <= 1), !l.Partial() && l.Share != 0:
		return Invalidf("lease %s counts for a share %g of its GPU", l.ID, l.Share)
	case l.MemMiB > MaxMemMiB:
		return Invalidf("lease %s has a budget of %d MiB", l.ID, l.MemMiB)
	case l.Job != nil && !l.Booked:
		return Invalidf("lease %s carries a job but is not a booking", l.ID)
	}
	if err := CheckContainers(l.Containers); err != nil {
		return Wrapf(CodeInvalid, err, "lease %s: %v", l.ID, err)
	}
	if l.Job != nil {
		if err := l.Job.Check(); err != nil {
			return Wrapf(CodeInvalid, err, "lease %s: %v", l.ID, err)
		}
	}
	return nil
}

func checkGPUs(gpus []int, need bool) error {
	if need && len(gpus) == 0 {
		return fmt.Errorf("no GPUs")
	}
	if len(gpus) > MaxGPUsPerNode {
		return fmt.Errorf("%d GPUs, over %d", len(gpus), MaxGPUsPerNode)
	}
	seen := make(map[int]bool, len(gpus))
	for _, g := range gpus {
		if g < 0 || g >= MaxGPUIndex {
			return fmt.Errorf("GPU index %d is out of range", g)
		}
		if seen[g] {
			return fmt.Errorf("GPU %d appears twice", g)
		}
		seen[g] = true
	}
	return nil
}

// CheckGPUs refuses a list of GPU indices that is out of range or repeats
// one.
func CheckGPUs(gpus []int) error {
	if err := checkGPUs(gpus, false); err != nil {
		return Wrap(CodeInvalid, err)
	}
	return nil
}

// CheckJob bounds a command line, its directory and session name.
func CheckJob(command []string, dir, name string) error {
	if len(command) > MaxCommandArgs {
		return Invalidf("the command has %d arguments; at most %d", len(command), MaxCommandArgs)
	}
	size := 0
	for _, a := range command {
		size += len(a)
		if strings.IndexByte(a, 0) >= 0 || !utf8.ValidString(a) {
			return Invalidf("the command holds a NUL byte or invalid UTF-8")
		}
	}
	if size > MaxCommandSize {
		return Invalidf("the command is %d bytes; at most %d", size, MaxCommandSize)
	}
	if len(command) > 0 && command[0] == "" {
		return Invalidf("the command is empty")
	}
	if dir != "" && (len(dir) > MaxPathLen || !strings.HasPrefix(dir, "/") || strings.IndexByte(dir, 0) >= 0) {
		return Invalidf("working directory %s must be an absolute path", QuoteInput(dir))
	}
	if name != "" && !ValidToken(name, MaxNameLen) {
		return Invalidf("session name %s must be one word of at most %d characters", QuoteInput(name), MaxNameLen)
	}
	return nil
}

// Validate checks an ended run's shape.
func (x *EndedRun) Validate() error {
	if !ValidToken(x.Entry, 2*MaxNameLen) || !ValidToken(x.Lease, 2*MaxNameLen) || !ValidToken(string(x.Reason), MaxNameLen) {
		return Invalidf("an ended run has a bad entry, lease or reason")
	}
	if x.Gang != "" && !ValidToken(x.Gang, 2*MaxNameLen) {
		return Invalidf("ended run %s has a bad gang", x.Lease)
	}
	return nil
}

// ValidSince bounds a time read from the wire to a sane range.
func ValidSince(t time.Time) bool {
	return t.IsZero() || t.Year() >= 2000 && t.Year() <= 9999
}
