package launch

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// pendingOption is the session option that holds messages for a session
// nobody is attached to; pendingHook shows them at the next attach.
const (
	pendingOption = "@dibs-pending"
	pendingHook   = "client-attached[4242]"
	maxPending    = 600
)

// pendingHookCommand shows the pending messages to the client that just
// attached, then forgets them. It is installed as a hook of the session, so
// it runs in the user's own tmux server with nothing of dibs present.
const pendingHookCommand = `if-shell -F "#{` + pendingOption + `}" { display-message -d 15000 "#{` + pendingOption + `}" ; set-option -u ` + pendingOption + ` }`

// Notify shows text to u wherever they use tmux on this node: in the
// status line of every client attached to their tmux server (any session,
// dibs's or their own), and, for each session nobody is attached to, at
// the next attach, newest first (a session option and a hook that shows it once: tmux's
// display-message needs a client, and a message for nobody is lost).
// shown counts clients told now, later sessions told at their next attach.
// A user with no tmux server is told nothing, without error. Safe for
// concurrent use.
func (l *Launcher) Notify(ctx context.Context, u User, text string) (shown, later int, err error) {
	out, err := l.run(ctx, u, "list-sessions", "-F", "#{session_attached}\t#{session_name}\t#{"+pendingOption+"}")
	if errors.Is(err, ErrNoSession) {
		return 0, 0, nil
	}
	if err != nil {
		return 0, 0, fmt.Errorf("notify %s: %w", u.Name, err)
	}
	cout, err := l.run(ctx, u, "list-clients", "-F", "#{client_name}")
	if err != nil && !errors.Is(err, ErrNoSession) {
		return 0, 0, fmt.Errorf("notify %s: %w", u.Name, err)
	}
	msg := messageText(text)
	delay := strconv.FormatInt(l.messageTime.Milliseconds(), 10)
	var args []string
	add := func(cmd ...string) {
		if len(args) > 0 {
			args = append(args, ";")
		}
		args = append(args, cmd...)
	}
	for _, c := range strings.Fields(string(cout)) {
		add("display-message", "-c", escapeSemicolon(c), "-d", delay, msg)
		shown++
	}
	for _, line := range strings.Split(strings.TrimRight(string(out), "\n"), "\n") {
		attached, rest, ok := strings.Cut(line, "\t")
		if !ok || attached != "0" {
			continue
		}
		name, old, _ := strings.Cut(rest, "\t")
		if !validName(name) {
			continue // not one tmux keeps as given: no exact target for it
		}
		// Newest first: the status line shows what fits. old is as tmux
		// keeps it (every '#' doubled): only the new text is escaped.
		pending := escapeFormat(cleanText(text))
		if old != "" {
			pending += " · " + old
		}
		if len(pending) > maxPending {
			cut := maxPending
			for cut > 0 && (!utf8.RuneStart(pending[cut]) || pending[cut-1] == '#') {
				cut-- // never end inside a rune, nor split a doubled '#'
			}
			pending = pending[:cut] + "…"
		}
		add("set-option", "-t", exact(name)+":", pendingOption, escapeSemicolon(pending))
		add("set-hook", "-t", exact(name)+":", pendingHook, pendingHookCommand)
		later++
	}
	if len(args) == 0 {
		return 0, 0, nil
	}
	if _, err := l.run(ctx, u, args...); err != nil {
		if strings.Contains(err.Error(), "can't find client") || strings.Contains(err.Error(), "no such session") || errors.Is(err, ErrNoSession) {
			return shown, later, nil // one left meanwhile: best effort
		}
		return shown, later, fmt.Errorf("notify %s: %w", u.Name, err)
	}
	return shown, later, nil
}
