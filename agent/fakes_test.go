package agent

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/dibs-gpu/dibs/launch"
)

// refuseSessions is a Sessions that starts nothing, for tests of the API
// surface where tmux is beside the point.
type refuseSessions struct{}

func (refuseSessions) Start(context.Context, launch.Spec) (launch.Session, error) {
	return launch.Session{}, fmt.Errorf("start: %w", launch.ErrTmuxNotFound)
}
func (refuseSessions) Exists(context.Context, launch.User, string) (bool, error)  { return false, nil }
func (refuseSessions) Message(context.Context, launch.User, string, string) error { return nil }
func (refuseSessions) Signal(context.Context, launch.User, string, syscall.Signal) error {
	return nil
}
func (refuseSessions) Kill(context.Context, launch.User, string) error { return nil }
func (refuseSessions) Watch(context.Context, launch.User, string, time.Duration) <-chan struct{} {
	return make(chan struct{})
}
func (refuseSessions) AttachCommand(launch.User, string) []string { return []string{"true"} }
