package launchtest_test

import (
	"github.com/dibs-gpu/dibs/launch/launchtest"
	"strings"
	"testing"
)

func TestUser(t *testing.T) {
	u := launchtest.User(t)
	out, err := launchtest.Run(t, u, nil, "id", "-un")
	if err != nil || strings.TrimSpace(out) != u.Name {
		t.Fatalf("%q %v", out, err)
	}
}
