package sshd

import (
	"fmt"
	"net/netip"
	"strings"
	"time"

	gossh "golang.org/x/crypto/ssh"
)

// authorizedKey is one line of an authorized_keys (or users) file: the key
// and the options written before it, which restrict where, until when and
// how it may be used.
type authorizedKey struct {
	key  gossh.PublicKey
	opts keyOptions
}

// keyOptions are a line's options, parsed as sshd parses them
// (sshauthopt_parse): later flags override earlier ones.
type keyOptions struct {
	// bad, when set, refuses the line whatever else it says (command=,
	// cert-authority, principals=, verify-required, or a malformed option
	// in a user's own file): a line sshd would refuse, or one that grants
	// something the board cannot honour.
	bad string
	// from is the from="..." pattern list ("" when absent).
	from string
	// expiry is the expiry-time (zero when absent).
	expiry time.Time
	// noPTY is set by no-pty and by restrict (unless a later pty undoes it).
	noPTY bool
	// noPTYBy names the option that took the terminal away.
	noPTYBy string
	// noTouch is no-touch-required, passed on to the signature check.
	noTouch bool
}

// parseKeyOptions reads the options gossh.ParseAuthorizedKey split off a
// line. loc (the local zone) reads expiry-time, as sshd does. The error
// says what is malformed (an unknown option, a bad value); sshd skips such
// a line.
func parseKeyOptions(raw []string, loc *time.Location) (keyOptions, error) {
	var o keyOptions
	certAuthority, principals := false, false
	for _, opt := range raw {
		name, value, hasValue := strings.Cut(opt, "=")
		name = strings.ToLower(name)
		if hasValue {
			v, err := dequote(value)
			if err != nil {
				return o, fmt.Errorf("option %s: %v", name, err)
			}
			value = v
		}
		switch {
		case name == "restrict" && !hasValue:
			o.noPTY, o.noPTYBy = true, "restrict"
		case name == "no-pty" && !hasValue:
			o.noPTY, o.noPTYBy = true, "no-pty"
		case name == "pty" && !hasValue:
			o.noPTY, o.noPTYBy = false, ""
		case name == "cert-authority" && !hasValue:
			certAuthority = true
		case name == "no-touch-required" && !hasValue:
			o.noTouch = true
		case name == "verify-required" && !hasValue:
			// Needs the FIDO user-verification flag checked, which the
			// SSH library here does not do.
			o.bad = "verify-required: user verification of security keys is not checked here"
			return o, nil
		case !hasValue && (name == "no-port-forwarding" || name == "port-forwarding" ||
			name == "no-agent-forwarding" || name == "agent-forwarding" ||
			name == "no-x11-forwarding" || name == "x11-forwarding" ||
			name == "no-user-rc" || name == "user-rc"):
			// About features the board never offers.
		case hasValue && (name == "permitopen" || name == "permitlisten" ||
			name == "environment" || name == "tunnel"):
			// Likewise: forwarding, tunnels and a shell's environment.
		case name == "command" && hasValue:
			o.bad = "restricted to a command (command=), which the board would bypass"
			return o, nil
		case name == "principals" && hasValue:
			principals = true
		case name == "from" && hasValue:
			if o.from != "" {
				return o, fmt.Errorf("more than one from= option")
			}
			if value == "" {
				return o, fmt.Errorf("empty from= option")
			}
			if matchHostAndIP("", netip.Addr{}, value) < 0 {
				return o, fmt.Errorf("invalid from=%q: want addresses, CIDR blocks or patterns with * and ?, each maybe negated with !", value)
			}
			o.from = value
		case name == "expiry-time" && hasValue:
			t, err := parseAbsoluteTime(value, loc)
			if err != nil {
				return o, fmt.Errorf("invalid expiry-time=%q: want YYYYMMDD[HHMM[SS]][Z]", value)
			}
			// sshd keeps the earliest of several.
			if o.expiry.IsZero() || t.Before(o.expiry) {
				o.expiry = t
			}
		default:
			return o, fmt.Errorf("unknown option %q (sshd refuses the line too)", opt)
		}
	}
	switch {
	case certAuthority:
		o.bad = "cert-authority: the key signs certificates, which this front door does not accept; list the user's own key"
	case principals:
		o.bad = "principals= is meaningful only for certificates, which this front door does not accept"
	}
	return o, nil
}

// dequote undoes the quotes of an option's value, as sshd's opt_dequote:
// the value is in double quotes, and \" stands for a quote.
func dequote(v string) (string, error) {
	if len(v) < 2 || v[0] != '"' || v[len(v)-1] != '"' {
		return "", fmt.Errorf("value not in double quotes")
	}
	v = v[1 : len(v)-1]
	var b strings.Builder
	for i := 0; i < len(v); i++ {
		if v[i] == '\\' && i+1 < len(v) && v[i+1] == '"' {
			i++
		} else if v[i] == '"' {
			return "", fmt.Errorf("unescaped quote in value")
		}
		b.WriteByte(v[i])
	}
	return b.String(), nil
}

// permits says why the line may not be used now from ip ("" when it may).
func (o keyOptions) permits(ip netip.Addr, now time.Time) string {
	if o.bad != "" {
		return o.bad
	}
	if !o.expiry.IsZero() && now.After(o.expiry) {
		return "key expired at " + o.expiry.Format(time.RFC3339) + " (expiry-time)"
	}
	if o.from != "" {
		// The front door does not resolve names (sshd's UseDNS no): the
		// host is matched as its address.
		switch matchHostAndIP(ip.String(), ip, o.from) {
		case 1:
		case 0:
			return fmt.Sprintf("not permitted from %s (from=%q)", ip, o.from)
		default:
			return fmt.Sprintf("invalid from=%q", o.from)
		}
	}
	return ""
}

// matchHostAndIP is OpenSSH's match_host_and_ip: 1 when the patterns
// admit the host or the address and no negated pattern matches either, 0
// when not, -1 when the list is invalid. With an invalid ip (and host "")
// it only checks the list.
func matchHostAndIP(host string, ip netip.Addr, patterns string) int {
	mip := addrMatchList(ip, patterns)
	if mip == -2 {
		return -1
	}
	if host == "" || !ip.IsValid() || mip == -1 {
		return 0
	}
	mhost := matchPatternList(strings.ToLower(host), patterns, true)
	if mhost == -1 || (mhost == 0 && mip == 0) {
		return 0
	}
	return 1
}

// addrMatchList is OpenSSH's addr_match_list: each entry, maybe negated
// with !, is an address or a CIDR block (a block with bits set past its
// mask is an error, -2), or else a wildcard pattern matched against the
// address's text. 1 on a positive match, -1 on a negated one, 0 when none.
func addrMatchList(ip netip.Addr, list string) int {
	ret := 0
	for _, entry := range strings.Split(list, ",") {
		neg := strings.HasPrefix(entry, "!")
		if neg {
			entry = entry[1:]
		}
		if entry == "" {
			return -2
		}
		matched := false
		if p, r := parseCIDR(entry); r == -2 {
			return -2
		} else if r == 0 {
			matched = ip.IsValid() && p.Addr().Is4() == ip.Is4() && p.Contains(ip)
		} else {
			matched = ip.IsValid() && matchPattern(ip.String(), entry)
		}
		if matched {
			if neg {
				return -1
			}
			ret = 1
		}
	}
	return ret
}

// parseCIDR is addr_pton_cidr: 0 with the block, -1 when the entry is not
// an address or block, -2 when the block has bits set past its mask.
func parseCIDR(s string) (netip.Prefix, int) {
	addr, bits, hasBits := strings.Cut(s, "/")
	a, err := netip.ParseAddr(addr)
	if err != nil || a.Zone() != "" {
		return netip.Prefix{}, -1
	}
	a = a.Unmap()
	n := a.BitLen()
	if hasBits {
		if _, err := fmt.Sscanf(bits, "%d", &n); err != nil || fmt.Sprint(n) != bits || n < 0 || n > a.BitLen() {
			return netip.Prefix{}, -1
		}
	}
	p := netip.PrefixFrom(a, n)
	if p.Masked().Addr() != a {
		return netip.Prefix{}, -2
	}
	return p, 0
}

// matchPatternList is OpenSSH's match_pattern_list: 1 if a pattern
// matches, -1 if a negated one does (that wins), 0 if none.
func matchPatternList(s, list string, lower bool) int {
	got := 0
	for _, p := range strings.Split(list, ",") {
		neg := strings.HasPrefix(p, "!")
		if neg {
			p = p[1:]
		}
		if lower {
			p = strings.ToLower(p)
		}
		if matchPattern(s, p) {
			if neg {
				return -1
			}
			got = 1
		}
	}
	return got
}

// matchPattern is OpenSSH's match_pattern: * matches any run of
// characters, ? any one.
func matchPattern(s, p string) bool {
	for len(p) > 0 {
		switch p[0] {
		case '*':
			for len(p) > 0 && p[0] == '*' {
				p = p[1:]
			}
			if p == "" {
				return true
			}
			for i := 0; i <= len(s); i++ {
				if matchPattern(s[i:], p) {
					return true
				}
			}
			return false
		case '?':
			if s == "" {
				return false
			}
		default:
			if s == "" || s[0] != p[0] {
				return false
			}
		}
		s, p = s[1:], p[1:]
	}
	return s == ""
}

// parseAbsoluteTime is OpenSSH's parse_absolute_time: YYYYMMDD,
// YYYYMMDDHHMM or YYYYMMDDHHMMSS in local time, or in UTC with a Z (or
// UTC) suffix.
func parseAbsoluteTime(s string, loc *time.Location) (time.Time, error) {
	if l := len(s); l > 1 && strings.EqualFold(s[l-1:], "z") {
		s, loc = s[:l-1], time.UTC
	} else if l > 3 && strings.EqualFold(s[l-3:], "utc") {
		s, loc = s[:l-3], time.UTC
	}
	var layout string
	switch len(s) {
	case 8:
		layout = "20060102"
	case 12:
		layout = "200601021504"
	case 14:
		layout = "20060102150405"
	default:
		return time.Time{}, fmt.Errorf("bad length")
	}
	return time.ParseInLocation(layout, s, loc)
}
