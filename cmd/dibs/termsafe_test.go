package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/nodeprobe/sim"
)

// pwned is the process name that retitled and cleared an admin's terminal
// through `dibs ls` and `dibs probe`; pwnedShown is what a terminal must
// show instead (the start of it: tables clip long names).
const (
	pwned      = "\x1b]0;PWNED\x07\x1b[2J"
	pwnedShown = `\x1b]0;PWNED`
)

// hostileText holds each kind of character that must not reach a terminal
// raw: ESC sequences, BEL, a C1 CSI, a bidi override, a zero-width space.
const hostileText = pwned + "\u009b2J\u202eevil\u200b"

// assertTerminalSafe fails when out holds anything a terminal would act on
// or hide: every byte but newlines must pass termsafe, and it must be
// UTF-8.
func assertTerminalSafe(t *testing.T, what, out string) {
	t.Helper()
	if !utf8.ValidString(out) {
		t.Errorf("%s: output is not UTF-8: %q", what, out)
	}
	for i, line := range strings.Split(out, "\n") {
		if err := termsafe.Check(line); err != nil {
			t.Errorf("%s: line %d holds %v: %q", what, i+1, err, line)
		}
	}
	for _, b := range []string{"\x1b", "\x07", "\u009b", "\u202e", "\u200b"} {
		if strings.Contains(out, b) {
			t.Errorf("%s: %q reached the output raw", what, b)
		}
	}
}

// hostileBoard is a board whose every outside string is hostile.
func hostileBoard(now time.Time) api.Board {
	l := &lease.Lease{ID: "node01-1", Node: "node01", GPUs: []int{0}, User: "eve" + hostileText, Kind: lease.KindInteractive,
		Note: hostileText, Session: "s" + hostileText, ExpiresAt: now.Add(time.Hour)}
	return api.Board{
		Self: "node01", Notices: []string{"notice " + hostileText},
		Nodes: []api.Node{
			{Name: "node01", State: api.NodeAlive, Host: nodeprobe.Host{Name: hostileText, DriverVersion: hostileText},
				GPUs: []api.GPU{
					{GPU: nodeprobe.GPU{Index: 0, Model: "H100" + hostileText}, Lease: l},
					{GPU: nodeprobe.GPU{Index: 1, Model: "H100", Processes: []nodeprobe.Process{{PID: 7, UID: 1000, User: "eve" + hostileText, Command: pwned, Container: hostileText}}},
						Flags: []lease.Flag{lease.FlagSquatted}},
				}},
			{Name: "node02" + hostileText, State: api.NodeDead + hostileText, TelemetryAt: now.Add(-time.Minute)},
		},
	}
}

// TestPrintersEscapeOutsideText feeds hostile strings through every table
// the CLI prints and checks what the person sees: no escape sequence, bidi
// override or zero-width character, and the visible escape instead.
func TestPrintersEscapeOutsideText(t *testing.T) {
	now := time.Date(2026, 3, 2, 9, 0, 0, 0, time.UTC)
	var b bytes.Buffer
	board := hostileBoard(now)
	printBoard(&b, board, now)
	assertTerminalSafe(t, "ls", b.String())
	for _, want := range []string{pwnedShown, `notice \x1b]0;PWNED\x07\x1b[2J\u009b2J\u202eevil\u200b`} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("ls does not show %q: %q", want, b.String())
		}
	}
	if board.Nodes[0].GPUs[1].Processes[0].Command != pwned {
		t.Error("printBoard changed the board it was given")
	}

	b.Reset()
	printWho(&b, []lease.Lease{*board.Escaped().Nodes[0].GPUs[0].Lease}, now)
	assertTerminalSafe(t, "who", b.String())
	if !strings.Contains(b.String(), `\x1b]0;PWNED`) {
		t.Errorf("who does not show the escaped note: %q", b.String())
	}

	b.Reset()
	printQueue(&b, api.Queue{Scheduler: "node01" + hostileText, Entries: []api.QueuedEntry{
		{ID: "node01-q1" + hostileText, Position: 1, User: "eve" + hostileText, Nodes: 1, GPUsPerNode: 2, Duration: "4h" + hostileText, Waiting: "for " + hostileText},
	}}, now)
	assertTerminalSafe(t, "queue", b.String())
	if !strings.Contains(b.String(), "for "+pwnedShown) {
		t.Errorf("queue does not show the escaped reason: %q", b.String())
	}

	b.Reset()
	printUsage(&b, api.UsageReport{Since: now, Users: []api.UserUsage{{User: hostileText, GPUHours: 1}}, Missing: []string{"node02" + hostileText}})
	assertTerminalSafe(t, "usage", b.String())

	b.Reset()
	printUsageChart(&b, api.DailyUsageReport{Since: now, Days: []api.UsageDay{{Start: now, GPUHours: map[string]float64{hostileText: 1}}}, Missing: []string{"node02" + hostileText}}, 80, false)
	assertTerminalSafe(t, "usage --chart", b.String())

	b.Reset()
	printStatus(&b, api.Status{Node: "node01" + hostileText, Version: hostileText, Backend: hostileText, DataDir: hostileText, Socket: hostileText,
		StartedAt: now, Members: []api.Member{{Name: hostileText, Addr: hostileText, State: hostileText}}})
	assertTerminalSafe(t, "status", b.String())

	b.Reset()
	if err := printJSON(&b, board); err != nil {
		t.Fatal(err)
	}
	assertTerminalSafe(t, "ls --json", b.String())
	var back api.Board
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if got := back.Nodes[0].GPUs[1].Processes[0].Command; got != pwned {
		t.Errorf("--json changed the command: %q, want %q", got, pwned)
	}
	if got := back.Nodes[0].GPUs[0].Lease.Note; got != hostileText {
		t.Errorf("--json changed the note: %q, want %q", got, hostileText)
	}
}

// writeHostileLoad writes a --sim-load file with pwned running on GPU 1.
func writeHostileLoad(t *testing.T, dir string) string {
	t.Helper()
	uid := os.Getuid()
	load := sim.Load{GPUs: map[int]sim.GPULoad{1: {UtilizationPct: 90, Processes: []sim.LoadProcess{
		{PID: 31337, UID: &uid, Command: pwned, UsedMemoryMiB: 1000},
	}}}}
	b, err := json.Marshal(load)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "load.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestProbeEscapesProcessNames: `dibs probe` shows a process named with
// escape sequences escaped; --json keeps the name (encoding/json and
// printJSON escape it) without a raw ESC.
func TestProbeEscapesProcessNames(t *testing.T) {
	dir := t.TempDir()
	load := writeHostileLoad(t, dir)
	out, errOut, code := dibs(t, filepath.Join(dir, "none.sock"), nil, "probe", "--sim", "2xH100-80GB", "--sim-load", load)
	if code != 0 {
		t.Fatalf("probe exit %d: %s", code, errOut)
	}
	assertTerminalSafe(t, "probe", out+errOut)
	if !strings.Contains(out, pwnedShown) || !strings.Contains(out, "31337") {
		t.Errorf("probe does not show the process escaped: %q", out)
	}
	out, errOut, code = dibs(t, filepath.Join(dir, "none.sock"), nil, "probe", "--json", "--sim", "2xH100-80GB", "--sim-load", load)
	if code != 0 {
		t.Fatalf("probe --json exit %d: %s", code, errOut)
	}
	assertTerminalSafe(t, "probe --json", out)
	var snap nodeprobe.Snapshot
	if err := json.Unmarshal([]byte(out), &snap); err != nil {
		t.Fatal(err)
	}
	if got := snap.GPUs[1].Processes[0].Command; got != pwned {
		t.Errorf("probe --json gives the command as %q, want %q", got, pwned)
	}
}

// TestCLIEscapesAgentText drives a real agent whose GPU 1 runs pwned: `dibs
// ls`, its --json, a refusal quoting the process and an agent error
// quoting what was typed reach the terminal escaped; notes with a bidi
// override or a zero-width space are refused at claim, with what to remove.
func TestCLIEscapesAgentText(t *testing.T) {
	dir := agenttest.PublicDir(t)
	p := startAgent(t, dir, "--sim", "2xH100-80GB", "--sim-load", writeHostileLoad(t, dir))
	agenttest.Eventually(t, 10*time.Second, "the hostile process on the board", func() bool {
		out, _, _ := dibs(t, p.socket, nil, "ls")
		return strings.Contains(out, "31337")
	})

	out, errOut, code := dibs(t, p.socket, nil, "ls")
	if code != 0 {
		t.Fatalf("ls exit %d: %s", code, errOut)
	}
	assertTerminalSafe(t, "ls", out+errOut)
	if !strings.Contains(out, pwnedShown) {
		t.Errorf("ls does not show the process escaped: %q", out)
	}

	out, _, _ = dibs(t, p.socket, nil, "ls", "--json")
	assertTerminalSafe(t, "ls --json", out)
	if !strings.Contains(out, `\u001b]0;PWNED\u0007`) {
		t.Errorf("ls --json does not carry the command JSON-escaped: %q", out)
	}

	for _, tc := range []struct {
		name string
		args []string
		want []string
	}{
		{"right-to-left override in a note", []string{"claim", "-g", "1", "--note", "fix \u202etxt.exe"},
			[]string{"note holds U+202E RIGHT-TO-LEFT OVERRIDE", "remove it"}},
		{"zero-width space in a note", []string{"claim", "-g", "1", "--note", "a\u200bb"},
			[]string{"note holds U+200B ZERO WIDTH SPACE", "remove it"}},
		{"a GPU with the hostile process", []string{"claim", "--ids", "1"},
			[]string{"process " + pwnedShown}},
		{"an id with an escape sequence", []string{"release", "node01-" + pwned},
			[]string{pwnedShown}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out, errOut, code := dibs(t, p.socket, nil, tc.args...)
			if code == 0 {
				t.Fatalf("accepted: %q", out)
			}
			assertTerminalSafe(t, "stderr", errOut)
			if lines := strings.Count(strings.TrimSpace(errOut), "\n"); lines != 0 {
				t.Errorf("error is %d lines, want one: %q", lines+1, errOut)
			}
			for _, w := range tc.want {
				if !strings.Contains(errOut, w) {
					t.Errorf("stderr %q does not say %q", errOut, w)
				}
			}
		})
	}
	assertTerminalSafe(t, "agent log", p.log.String())
}
