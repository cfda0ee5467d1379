package agent_test

import (
	"flag"
	"os"
	"testing"
)

// TestMain lets more tests run at once than the machine has cores (go test's
// default): these tests spend their time waiting for failure detectors,
// gossip and tmux, not computing, so on a 2-core machine running only two at
// a time would leave the CPUs idle. An explicit -parallel wins.
func TestMain(m *testing.M) {
	flag.Parse()
	explicit := false
	flag.Visit(func(f *flag.Flag) { explicit = explicit || f.Name == "test.parallel" })
	if !explicit {
		flag.Set("test.parallel", "8")
	}
	os.Exit(m.Run())
}
