package launch

import (
	"math/rand/v2"
	"regexp"
	"strings"
	"testing"
)

// TestTermNameMatchesItsPattern: the byte-by-byte check of a client's TERM
// accepts exactly what the pattern it replaced did, around its bounds.
func TestTermNameMatchesItsPattern(t *testing.T) {
	pattern := regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)
	const chars = "aZ9._+-_ /;\x1b="
	r := rand.New(rand.NewPCG(3, 4))
	words := []string{"xterm-256color", "screen.xterm", "tmux+x", "-x", "", strings.Repeat("a", 64), strings.Repeat("a", 65)}
	for _, n := range []int{1, 2, 63, 64, 65} {
		for range 300 {
			b := make([]byte, n)
			for i := range b {
				b[i] = chars[r.IntN(len(chars))]
			}
			words = append(words, string(b))
		}
	}
	for _, w := range words {
		if got, want := termName(w), pattern.MatchString(w); got != want {
			t.Errorf("termName(%q) = %v, the pattern says %v", w, got, want)
		}
	}
}
