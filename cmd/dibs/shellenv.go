package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/dibs-gpu/dibs/api"
)

// printClaimed tells about GPUs claimed for the shell `dibs claim` was
// typed in. So that `eval "$(dibs claim -g 1)"` works, stdout holds only
// shell assignments when it is not a terminal, and every line a person
// reads goes to stderr. The assignments are printed only when the GPUs are
// on this node: CUDA_VISIBLE_DEVICES=0 from node01 would pick GPU 0 of
// whichever node the shell is on, which nobody leased.
func (c *cli) printClaimed(r api.ClaimResponse) {
	human := c.stdout
	if !writerIsTerminal(c.stdout) {
		human = c.stderr
	}
	c.printGrantTo(human, r)
	if r.Here {
		fmt.Fprintln(c.stdout, exportLine(r))
		return
	}
	fmt.Fprintf(human, "the GPUs are on %s, not on this node, so this shell gets no CUDA_VISIBLE_DEVICES: `ssh %s` and there `%s`, or `dibs run --node %s -- CMD` to start work on that node\n",
		safe(r.Node), safe(r.Node), exportLine(r), safe(r.Node))
}

// exportLine is the shell line that puts a lease's GPUs into a shell.
func exportLine(r api.ClaimResponse) string {
	return "export CUDA_DEVICE_ORDER=PCI_BUS_ID CUDA_VISIBLE_DEVICES=" + shellValue(r.CUDAVisibleDevices) + " DIBS_LEASE_ID=" + shellValue(r.ID)
}

// shellValue quotes s for a POSIX shell unless it is plainly safe (GPU
// indices, MIG UUIDs, lease ids).
func shellValue(s string) string {
	if s != "" && strings.Trim(s, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789,-_./:") == "" {
		return s
	}
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// writerIsTerminal reports whether w is a terminal (not a pipe, a file or
// a command substitution).
func writerIsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}
