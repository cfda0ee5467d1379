package lease

import (
	"strconv"
	"strings"
	"time"

	"github.com/dibs-gpu/dibs/base/words"
)

func gpuList(g []int) string {
	if len(g) == 1 {
		return "GPU " + strconv.Itoa(g[0])
	}
	s := make([]string, len(g))
	for i, x := range g {
		s[i] = strconv.Itoa(x)
	}
	return "GPUs " + strings.Join(s, ",")
}

// timeLeft says how long a lease still runs, or how long it is overdue (end
// action warn keeps it held past its end).
func timeLeft(end, now time.Time) string {
	if left := end.Sub(now); left > 0 {
		return "for " + words.FormatDuration(left) + " more"
	}
	return words.FormatDuration(now.Sub(end)) + " past its end"
}
