package main

import "strings"

// shortModel drops the vendor prefix every model shares.
func shortModel(m string) string {
	m = strings.TrimPrefix(m, "NVIDIA ")
	return strings.TrimPrefix(m, "GeForce ")
}

// orDash shows an empty column as "-".
func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// clip shortens s to n runes, marking the cut with "~" so a truncated name
// is not mistaken for a whole one.
func clip(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "~"
}
