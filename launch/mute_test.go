package launch_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// TestMutedTmuxServerIsBounded: a user swaps their tmux socket for a
// listener that never answers. Every call the root agent makes into that
// server comes back within the call timeout with ErrNoAnswer, never hangs
// and never reads as "the session is gone" (which would end a lease).
func TestMutedTmuxServerIsBounded(t *testing.T) {
	u := launchtest.User(t)
	l, tmpDir := launch.NewTestLauncher(t, "")
	l = launch.New(launch.Options{TmuxTmpDir: tmpDir, CallTimeout: 500 * time.Millisecond})
	if _, err := l.Start(context.Background(), launch.Spec{Name: "job", User: u, Command: []string{"sleep", "600"}}); err != nil {
		t.Fatal(err)
	}
	launchtest.MuteTmux(t, tmpDir, u)
	calls := []struct {
		name string
		call func(ctx context.Context) error
	}{
		{"exists", func(ctx context.Context) error { _, err := l.Exists(ctx, u, "job"); return err }},
		{"list", func(ctx context.Context) error { _, err := l.List(ctx, u); return err }},
		{"notify", func(ctx context.Context) error { _, _, err := l.Notify(ctx, u, "hello"); return err }},
		{"message", func(ctx context.Context) error { return l.Message(ctx, u, "job", "hello") }},
		{"kill", func(ctx context.Context) error { return l.Kill(ctx, u, "job") }},
		{"start", func(ctx context.Context) error {
			_, err := l.Start(ctx, launch.Spec{Name: "other", User: u, Command: []string{"true"}})
			return err
		}},
	}
	for _, c := range calls {
		t.Run(c.name, func(t *testing.T) {
			began := time.Now()
			done := make(chan error, 1)
			go func() { done <- c.call(context.Background()) }()
			select {
			case err := <-done:
				took := time.Since(began)
				if !errors.Is(err, launch.ErrNoAnswer) {
					t.Errorf("%s against a muted server: %v; want an error wrapping ErrNoAnswer", c.name, err)
				}
				if errors.Is(err, launch.ErrNoSession) {
					t.Errorf("%s: a server that does not answer was taken for a gone session: %v", c.name, err)
				}
				if took > 3*time.Second {
					t.Errorf("%s took %v; want about the 500ms call timeout", c.name, took)
				}
			case <-time.After(20 * time.Second):
				t.Fatalf("%s against a muted tmux server did not come back in 20s", c.name)
			}
		})
	}
	// Watch retries a server that does not answer; it never reports the end.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	gone := l.Watch(ctx, u, "job", 100*time.Millisecond)
	select {
	case <-gone:
		t.Fatal("Watch took a muted tmux server for the session's end")
	case <-time.After(1500 * time.Millisecond):
	}
}
