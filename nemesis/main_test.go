package nemesis

import (
	"os"
	"testing"
)

// TestMain lets this test binary be the nemesis's service replicas too
// (ServiceMain): the services Run starts are this binary, run again.
func TestMain(m *testing.M) {
	ServiceMain()
	os.Exit(m.Run())
}
