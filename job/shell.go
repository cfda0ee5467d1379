package job

import "strings"

// ShellLine is a command as one line a POSIX shell (sh, bash) reads back
// as the same argv, each argument a ShellWord: how `dibs export` writes a
// run's command into an sbatch script or a container's args.
func ShellLine(argv []string) string {
	parts := make([]string, len(argv))
	for i, a := range argv {
		parts[i] = ShellWord(a)
	}
	return strings.Join(parts, " ")
}

// ShellWord quotes s as one shell word: as is when it holds only safe
// characters, else in single quotes (a single quote inside is closed,
// escaped with a backslash and opened again).
func ShellWord(s string) string {
	if s != "" && !strings.ContainsFunc(s, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,+@%", r))
	}) {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}
