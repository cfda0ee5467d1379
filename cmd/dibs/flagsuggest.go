package main

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// suggestFlag adds "did you mean --gpus?" to an unknown long flag's error,
// as cobra does for a mistyped command: `dibs claim --gpu 1` names the flag
// the person meant. It is every command's flag error handler (set on the
// root, inherited), and the ones that say more call it last.
func suggestFlag(cmd *cobra.Command, err error) error {
	name, ok := strings.CutPrefix(err.Error(), "unknown flag: --")
	if !ok {
		return err
	}
	best, bestD := "", 3
	look := func(f *pflag.Flag) {
		if f.Hidden {
			return
		}
		d := editDistance(name, f.Name)
		if strings.HasPrefix(f.Name, name) || strings.HasPrefix(name, f.Name) {
			d = min(d, 1)
		}
		if d < bestD || d == bestD && f.Name < best {
			best, bestD = f.Name, d
		}
	}
	cmd.Flags().VisitAll(look)
	cmd.InheritedFlags().VisitAll(look)
	if best == "" {
		return fmt.Errorf("%w (`%s --help` lists its flags)", err, cmd.CommandPath())
	}
	return fmt.Errorf("%w: did you mean --%s?", err, best)
}

// editDistance is the Levenshtein distance between two short words.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
