package words

// Words a person reads about GPUs and time, shared by the refusals, the
// pools and the queue's messages.

import (
	"math"
	"strconv"
	"strings"
)

// FormatGPUs writes a count of GPUs that may hold fractions: "2", "1.5",
// "0.38".
func FormatGPUs(n float64) string {
	return strconv.FormatFloat(math.Round(n*100)/100, 'f', -1, 64)
}

// GPUCount is n GPUs in words a person reads: "1 GPU", "2 GPUs".
func GPUCount(n int) string { return strconv.Itoa(n) + " " + GPUWord(n) }

// GPUWord is "GPU" or "GPUs", as n asks.
func GPUWord(n int) string {
	if n == 1 {
		return "GPU"
	}
	return "GPUs"
}

// OneLine folds text from outside (an error, a peer's message, a probe's
// output) onto one line: every run of white space, newlines included,
// becomes one space. A log line or a one-line answer stays one line. It is
// the one copy for every room above lease.
func OneLine(s string) string { return strings.Join(strings.Fields(s), " ") }
