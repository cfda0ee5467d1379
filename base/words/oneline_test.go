package words_test

import (
	"testing"

	"github.com/dibs-gpu/dibs/base/words"
)

// OneLine is the one copy the rooms above lease fold outside text with: a
// multi-line error becomes one line, runs of white space one space.
func TestOneLine(t *testing.T) {
	for in, want := range map[string]string{
		"":                               "",
		"dial tcp: refused":              "dial tcp: refused",
		"  line one\n\tline two \r\n":    "line one line two",
		"nvidia-smi:\n  GPU 0: lost\n\n": "nvidia-smi: GPU 0: lost",
	} {
		if got := words.OneLine(in); got != want {
			t.Errorf("OneLine(%q) = %q, want %q", in, got, want)
		}
	}
}
