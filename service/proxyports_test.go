package service

import (
	"strings"
	"testing"
)

func TestParsePortRange(t *testing.T) {
	r, err := ParsePortRange(" 30000 - 30099 ")
	if err != nil || r != (PortRange{30000, 30099}) || r.Backend() != 30000 || r.Holds(30000) || !r.Holds(30099) || r.Holds(30100) {
		t.Fatalf("30000-30099: %+v %v", r, err)
	}
	for in, want := range map[string]string{
		"30000":       "is not a range FIRST-LAST",
		"a-b":         "is not a range FIRST-LAST",
		"30000-30000": "30000-30000 must be FIRST-LAST with 1 <= FIRST < LAST <= 65535",
		"0-10":        "must be FIRST-LAST",
		"65000-70000": "must be FIRST-LAST",
		"20000-21024": "20000-21024 is 1025 ports; give at most 1024",
	} {
		if _, err := ParsePortRange(in); err == nil || !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%q: %v, want one line with %q", in, err, want)
		}
	}
	if p, ok := (PortRange{10, 12}).Pick(map[int]bool{11: true}); !ok || p != 12 {
		t.Errorf("pick past 11: %d %v", p, ok)
	}
	if _, ok := (PortRange{10, 12}).Pick(map[int]bool{11: true, 12: true}); ok {
		t.Error("a full range picked a port")
	}
}
