// Package columns holds the two rules every table dibs and dibsd print
// follows for a cell: an empty value shows as "-", and a value cut to fit
// its column says so with "~", so a cut name is never taken for a whole one.
package columns

// OrDash shows an empty cell as "-".
func OrDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Clip shortens s to n runes, marking the cut with "~".
func Clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "~"
}
