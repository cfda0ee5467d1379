package daemoncmd

import (
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// TestProbeTableEscapesOutsideText: every string in a snapshot is anyone's
// to choose (process names, owners) or the hardware's; `dibs probe` shows
// them escaped, and leaves the snapshot it was given as it was. (Moved from
// cmd/dibs's TestPrintersEscapeOutsideText with the probe.)
func TestProbeTableEscapesOutsideText(t *testing.T) {
	const (
		pwned       = "\x1b]0;PWNED\x07\x1b[2J"
		pwnedShown  = `\x1b]0;PWNED`
		hostileText = pwned + "\u009b2J\u202eevil\u200b"
	)
	snap := nodeprobe.Snapshot{Host: nodeprobe.Host{Name: hostileText, DriverVersion: hostileText, CUDAVersion: hostileText, Backend: nodeprobe.BackendSim},
		GPUs: []nodeprobe.GPU{{Index: 0, Model: hostileText, Error: hostileText, UUID: hostileText, CPUs: hostileText,
			MIGDevices: []nodeprobe.MIGDevice{{UUID: hostileText, Profile: hostileText}},
			Processes:  []nodeprobe.Process{{PID: 1, User: hostileText, Command: pwned, Container: hostileText}}}}}
	var b strings.Builder
	if err := writeProbeTable(&b, snap); err != nil {
		t.Fatal(err)
	}
	for i, line := range strings.Split(b.String(), "\n") {
		if err := termsafe.Check(line); err != nil {
			t.Errorf("probe: line %d holds %v: %q", i+1, err, line)
		}
	}
	for _, raw := range []string{"\x1b", "\x07", "\u009b", "\u202e", "\u200b"} {
		if strings.Contains(b.String(), raw) {
			t.Errorf("probe: %q reached the output raw", raw)
		}
	}
	if !strings.Contains(b.String(), pwnedShown) {
		t.Errorf("probe does not show the escaped command: %q", b.String())
	}
	if snap.GPUs[0].Processes[0].Command != pwned {
		t.Error("writeProbeTable changed the snapshot it was given")
	}
}

// TestProbeTableSaysLocalCPUs: `dibs probe` says which cores are local to
// which GPUs, or that the GPUs report none.
func TestProbeTableSaysLocalCPUs(t *testing.T) {
	for _, tt := range []struct {
		cpus []string
		want string
	}{
		{[]string{"0-7", "0-7", "8-15"}, "\nlocal CPUs: GPUs 0-1: cores 0-7; GPU 2: cores 8-15\n"},
		{[]string{"", "", ""}, "\nlocal CPUs: not reported by its GPUs: sessions run on any core\n"},
	} {
		var snap nodeprobe.Snapshot
		for i, c := range tt.cpus {
			snap.GPUs = append(snap.GPUs, nodeprobe.GPU{Index: i, Model: "NVIDIA H100", CPUs: c})
		}
		var b strings.Builder
		if err := writeProbeTable(&b, snap); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(b.String(), tt.want) {
			t.Errorf("probe of GPUs on %q lacks %q:\n%s", tt.cpus, tt.want, b.String())
		}
	}
}
