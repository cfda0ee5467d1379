package launch

import (
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// TestMessageText: what dibs shows in a tmux status line cannot drive the
// attached terminal, reorder text or run a tmux format.
func TestMessageText(t *testing.T) {
	tests := []struct{ in, want string }{
		{"lease n1-4 ends in 10m", "lease n1-4 ends in 10m"},
		{"a\x1b]0;PWNED\x07b", "a ]0;PWNED b"},
		{"c1 \u009b2J", "c1  2J"},
		{"bidi \u202eevil\u200b", "bidi  evil "},
		{"line\u2028sep", "line sep"},
		{"#(reboot)", "##(reboot)"},
		{"end;", `end\;`},
		{"训练 🚀", "训练 🚀"},
	}
	for _, tc := range tests {
		if got := messageText(tc.in); got != tc.want {
			t.Errorf("messageText(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
}

func TestParseStatPPID(t *testing.T) {
	tests := []struct {
		stat string
		want int
		ok   bool
	}{
		{"42 (sleep) S 7 42 42 0 -1", 7, true},
		{"42 (we ird) name)) R 1 42", 1, true},
		{"42 (x", 0, false},
		{"42 (x) S", 0, false},
	}
	for _, tc := range tests {
		got, ok := parseStatPPID([]byte(tc.stat))
		if got != tc.want || ok != tc.ok {
			t.Errorf("parseStatPPID(%q) = %d, %v; want %d, %v", tc.stat, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseStatus(t *testing.T) {
	status := "Name:\tsudo\nUid:\t1000\t0\t0\t0\nGid:\t100\t100\t100\t100\nSigIgn:\t0000000000000004\nSigCgt:\t0000000000004200\n"
	st, ok := parseStatus([]byte(status))
	want := procStatus{realUID: 1000, savedUID: 0, caught: 0x4200, ignored: 0x4}
	if st != want || !ok {
		t.Errorf("parseStatus = %+v, %v; want %+v, true", st, ok, want)
	}
	for sig, want := range map[syscall.Signal]bool{syscall.SIGUSR1: true, syscall.SIGTERM: true, syscall.SIGQUIT: true, syscall.SIGINT: false, syscall.SIGUSR2: false} {
		if got := st.handles(sig); got != want {
			t.Errorf("handles(%v) = %v, want %v", sig, got, want)
		}
	}
	if _, ok := parseStatus([]byte("Name:\tx\nUid:\t1\t1\t1\t1\n")); ok {
		t.Error("parseStatus without signal masks reported ok")
	}
}

func TestShouldSignal(t *testing.T) {
	tests := []struct {
		sig              syscall.Signal
		handled, wrapper bool
		want             bool
	}{
		{syscall.SIGKILL, false, true, true},
		{syscall.SIGUSR1, true, false, true},
		{syscall.SIGUSR1, true, true, true},
		{syscall.SIGUSR1, false, false, false}, // a notice must not kill bystanders
		{syscall.SIGTERM, false, false, true},
		{syscall.SIGTERM, false, true, false}, // a wrapper shell would hang up the job
		{syscall.SIGTERM, true, true, true},
		{syscall.SIGINT, false, false, true},
		{syscall.SIGCONT, false, true, true},
	}
	for _, tc := range tests {
		if got := shouldSignal(tc.sig, tc.handled, tc.wrapper); got != tc.want {
			t.Errorf("shouldSignal(%v, handled=%v, wrapper=%v) = %v, want %v", tc.sig, tc.handled, tc.wrapper, got, tc.want)
		}
	}
}

func TestDescendants(t *testing.T) {
	parents := map[int]int{1: 0, 10: 1, 11: 10, 12: 11, 13: 10, 20: 1, 21: 20}
	tests := []struct {
		roots []int
		want  []int
	}{
		{[]int{10}, []int{10, 11, 13, 12}},
		{[]int{10, 11}, []int{10, 11, 13, 12}}, // 11 once, though reached twice
		{[]int{99}, nil},
		{[]int{20, 99}, []int{20, 21}},
	}
	for _, tc := range tests {
		got := descendants(parents, tc.roots)
		// Siblings come in map order; parents must precede children.
		if !sameSet(got, tc.want) || (len(got) > 0 && got[0] != tc.want[0]) {
			t.Errorf("descendants(%v) = %v, want %v in some sibling order", tc.roots, got, tc.want)
		}
	}
}

func sameSet(a, b []int) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

func TestPasswdShell(t *testing.T) {
	data := []byte("root:x:0:0:root:/root:/bin/bash\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\nempty:x:5:5::/:\nbroken:x\n")
	tests := []struct {
		name, want string
		ok         bool
	}{
		{"root", "/bin/bash", true},
		{"nobody", "/usr/sbin/nologin", true},
		{"empty", "/bin/sh", true},
		{"broken", "", false},
		{"missing", "", false},
	}
	for _, tc := range tests {
		if got, ok := passwdShell(data, tc.name); got != tc.want || ok != tc.ok {
			t.Errorf("passwdShell(%s) = %q, %v; want %q, %v", tc.name, got, ok, tc.want, tc.ok)
		}
	}
}

func TestLookupUser(t *testing.T) {
	me, err := LookupUID(os.Geteuid())
	if err != nil {
		t.Fatalf("LookupUID(self): %v", err)
	}
	if me.UID != os.Geteuid() || me.Name == "" || me.Home == "" || me.Shell == "" || !slices.Contains(me.Groups, me.GID) {
		t.Errorf("LookupUID(self) = %+v; want uid %d, a name, home, shell and the primary group among Groups", me, os.Geteuid())
	}
	byName, err := LookupUser(me.Name)
	if err != nil || byName.UID != me.UID || !slices.Equal(byName.Groups, me.Groups) {
		t.Errorf("LookupUser(%s) = %+v, %v; want %+v", me.Name, byName, err, me)
	}
	if out, err := exec.Command("id", "-G").Output(); err == nil && os.Geteuid() == os.Getuid() {
		if got, want := intsString(me.Groups), sortedFields(string(out)); got != want {
			t.Errorf("Groups = %s, want id -G = %s", got, want)
		}
	}
	if _, err := LookupUser("no-such-user-dibs"); err == nil {
		t.Error("LookupUser(no-such-user-dibs) succeeded")
	}
}

func sortedFields(s string) string {
	var ids []int
	for _, f := range strings.Fields(s) {
		n, _ := strconv.Atoi(f)
		ids = append(ids, n)
	}
	slices.Sort(ids)
	return intsString(slices.Compact(ids))
}
