// Command dibsd is the dibs daemon's binary, as tailscaled is tailscale's:
// `dibsd agent` runs on every GPU node (the packaged dibs.service), and it
// also carries the demo, the GPU probe, keygen and config check. People run
// the client, dibs, which links none of the daemon and hands those verbs
// here. The commands live in cmd/internal/daemoncmd.
package main

import (
	"os"

	"github.com/dibs-gpu/dibs/cmd/internal/daemoncmd"
)

func main() {
	os.Exit(daemoncmd.Main(os.Args[1:], os.Stdout, os.Stderr))
}
