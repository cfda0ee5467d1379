package words

import (
	"fmt"
	"time"
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

// ValidSince bounds a time read from the wire to a sane range.
func ValidSince(t time.Time) bool {
	return t.IsZero() || t.Year() >= 2000 && t.Year() <= 9999
}
