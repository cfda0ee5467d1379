package main

import "strings"

// shortModel drops the vendor prefix every model shares.
func shortModel(m string) string {
	m = strings.TrimPrefix(m, "NVIDIA ")
	return strings.TrimPrefix(m, "GeForce ")
}
