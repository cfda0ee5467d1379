package api

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
	"unicode/utf8"
)

// The parts of an attach command, as agents build them (launch.AttachCommand,
// agent's Attach). Only these characters are accepted, so nothing can be read
// as an option by tmux or ssh, or as syntax by the remote shell ssh hands
// its command to. They are checked byte by byte rather than by regexps: a
// bounded repetition like {0,999} compiles into a program of a thousand
// states, which every dibs command paid for at start-up (3 ms).

// sessionTarget is "=" and a session name as launch.CheckName allows it:
// =[A-Za-z0-9_][A-Za-z0-9_-]{0,127}.
func sessionTarget(s string) bool {
	return len(s) >= 2 && s[0] == '=' && plainRun(s[1:], 128, alnum_, alnum_dash)
}

// safePath is an absolute path in plain characters (a tmux binary or
// socket): /[A-Za-z0-9_][A-Za-z0-9._/-]{0,999}.
func safePath(s string) bool {
	return len(s) >= 2 && s[0] == '/' && plainRun(s[1:], 1000, alnum_, func(c byte) bool { return alnum_dash(c) || c == '.' || c == '/' })
}

// sshHost is a node name or address, never an option:
// [A-Za-z0-9][A-Za-z0-9._-]{0,252}.
func sshHost(s string) bool {
	return plainRun(s, 253, func(c byte) bool { return alnum_(c) && c != '_' }, func(c byte) bool { return alnum_dash(c) || c == '.' })
}

// plainRun says whether s is 1 to max bytes, the first one first, the rest
// rest.
func plainRun(s string, max int, first, rest func(byte) bool) bool {
	if len(s) == 0 || len(s) > max || !first(s[0]) {
		return false
	}
	for i := 1; i < len(s); i++ {
		if !rest(s[i]) {
			return false
		}
	}
	return true
}

func alnum_(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_'
}

func alnum_dash(c byte) bool { return alnum_(c) || c == '-' }

// CheckAttachCommand accepts only the two commands an agent sends to attach to
// a session — `tmux [-S SOCKET] attach-session -t =NAME` (tmux by name or by
// absolute path) and `ssh -t HOST` followed by that tmux command — so that an
// agent that is wrong, or not the agent, cannot have the caller run anything
// else (`sh -c …`, `ssh -oProxyCommand=…`). The refusal shows the argv
// safely quoted.
func CheckAttachCommand(argv []string) error {
	if len(argv) == 0 {
		return fmt.Errorf("the agent sent no command to attach with: update dibs on this node, or attach with `tmux attach` yourself")
	}
	rest := argv
	if argv[0] == "ssh" {
		if len(argv) < 3 || argv[1] != "-t" || !sshHost(argv[2]) {
			return unrecognised(argv)
		}
		rest = argv[3:]
	}
	if !isTmuxAttach(rest) {
		return unrecognised(argv)
	}
	return nil
}

// isTmuxAttach says whether argv is exactly [-S SOCKET] attach-session -t =NAME
// after a tmux binary.
func isTmuxAttach(argv []string) bool {
	if len(argv) == 0 || !(argv[0] == "tmux" || safePath(argv[0]) && filepath.Base(argv[0]) == "tmux") {
		return false
	}
	argv = argv[1:]
	if len(argv) >= 2 && argv[0] == "-S" {
		if !safePath(argv[1]) {
			return false
		}
		argv = argv[2:]
	}
	return len(argv) == 3 && argv[0] == "attach-session" && argv[1] == "-t" && sessionTarget(argv[2])
}

func unrecognised(argv []string) error {
	return fmt.Errorf("refusing to run the attach command the agent sent, which is not `tmux attach-session` or `ssh -t HOST tmux attach-session`: %s (nothing was run; a genuine agent never sends this, so tell whoever runs it)", QuoteArgv(argv))
}

// maxQuoted bounds what QuoteArgv prints: enough to see what was sent.
const maxQuoted = 1024

// QuoteArgv writes argv as one line a POSIX shell would read back as the same
// words, with every control, format or invalid byte escaped ($'\x1b'), so
// printing it cannot move the cursor, recolour or rewrite the terminal. Long
// commands are cut, saying so.
func QuoteArgv(argv []string) string {
	var b strings.Builder
	for i, a := range argv {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(quoteWord(a))
		if b.Len() > maxQuoted {
			cut := b.String()[:maxQuoted]
			for !utf8.ValidString(cut) {
				cut = cut[:len(cut)-1]
			}
			return cut + fmt.Sprintf("… (cut; %d words in all)", len(argv))
		}
	}
	return b.String()
}

// plainWord is a word a shell reads as itself: [A-Za-z0-9_@%+=:,./-]+.
func plainWord(s string) bool {
	return plainRun(s, len(s), func(c byte) bool { return alnum_dash(c) || strings.IndexByte("@%+=:,./", c) >= 0 },
		func(c byte) bool { return alnum_dash(c) || strings.IndexByte("@%+=:,./", c) >= 0 })
}

func quoteWord(s string) string {
	if plainWord(s) {
		return s
	}
	printable := utf8.ValidString(s)
	for _, r := range s {
		if !strconv.IsPrint(r) {
			printable = false
			break
		}
	}
	if printable {
		return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
	}
	// ANSI-C quoting, which bash, zsh and ksh read back.
	var b strings.Builder
	b.WriteString("$'")
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && n <= 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case r == '\'' || r == '\\':
			b.WriteByte('\\')
			b.WriteRune(r)
		case strconv.IsPrint(r):
			b.WriteRune(r)
		case r < 0x80:
			fmt.Fprintf(&b, `\x%02x`, r)
		case r <= 0xffff:
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			fmt.Fprintf(&b, `\U%08x`, r)
		}
		i += n
	}
	b.WriteByte('\'')
	return b.String()
}
