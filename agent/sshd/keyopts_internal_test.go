package sshd

import (
	"net/netip"
	"testing"
	"time"
)

// from= lists match as OpenSSH's match_host_and_ip (addresses, CIDR
// blocks, * and ? patterns, negation winning, an inconsistent block an
// error).
func TestMatchHostAndIP(t *testing.T) {
	ip := netip.MustParseAddr("127.0.0.1")
	for _, c := range []struct {
		list string
		want int
	}{
		{"127.0.0.1", 1}, {"10.9.9.9", 0}, {"127.0.0.0/8", 1}, {"10.0.0.0/8", 0},
		{"127.*", 1}, {"127.0.0.?", 1}, {"127.0.0.??", 0}, {"*", 1},
		{"*,!127.0.0.1", 0}, {"!127.0.0.1,*", 0}, {"!10.0.0.0/8,127.0.0.1", 1},
		{"127.0.0.1/8", -1}, {"10.9.9.9,127.0.0.1", 1}, {"::1", 0}, {"::/0", 0},
		{"127.0.0.1/33", 0}, {",127.0.0.1", -1}, {"!", -1},
	} {
		if got := matchHostAndIP(ip.String(), ip, c.list); got != c.want {
			t.Errorf("from=%q for %s: %d, want %d", c.list, ip, got, c.want)
		}
	}
}

// expiry-time is read as sshd reads it: local time unless it ends in Z.
func TestParseAbsoluteTime(t *testing.T) {
	loc := time.FixedZone("X", 3600)
	for _, c := range []struct {
		in   string
		want time.Time
	}{
		{"20250102", time.Date(2025, 1, 2, 0, 0, 0, 0, loc)},
		{"202501021304", time.Date(2025, 1, 2, 13, 4, 0, 0, loc)},
		{"20250102130405", time.Date(2025, 1, 2, 13, 4, 5, 0, loc)},
		{"20250102130405Z", time.Date(2025, 1, 2, 13, 4, 5, 0, time.UTC)},
	} {
		got, err := parseAbsoluteTime(c.in, loc)
		if err != nil || !got.Equal(c.want) {
			t.Errorf("%s: %v %v, want %v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"2025", "2025010", "20251340", "2025-01-02"} {
		if _, err := parseAbsoluteTime(bad, loc); err == nil {
			t.Errorf("%s parsed", bad)
		}
	}
}
