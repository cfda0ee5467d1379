package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/columns"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/event"
)

// The commands that keep a person posted on what happens to their work
// (events, notify, logs) and the notebook they run (jupyter) live in this
// file, logs.go and jupyter.go.

func eventsCmd(c *cli) *cobra.Command {
	var req api.EventsRequest
	var asJSON bool
	var kinds []string
	cmd := &cobra.Command{
		Use:   "events",
		Short: "What happened on every node: claims, releases, ends and why, queue steps, warnings, squatters, agents",
		Long: `List the events every node recorded (each keeps its own for 14 days by default,
[events] keep in the agent's config), oldest first. With --follow, keep printing
new ones as they happen anywhere in the cluster.

Kinds: ` + kindList(),
		Example: `  dibs events --since 2h
  dibs events --user alice --follow
  dibs events --since 7d --json | jq '.events[] | select(.kind == "end")'
  dibs events -f --json | jq 'select(.kind == "end")'     # --follow: one event a line
  dibs events --kind svc- --since 7d                       # every service's steps
  dibs events --kind svc-crash-loop,svc-idle -f`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if req.Since != "" {
				if _, err := words.ParseDuration(req.Since); err != nil {
					return fmt.Errorf("--since: %w", err)
				}
			}
			keep, err := kindFilter(kinds)
			if err != nil {
				return err
			}
			if req.Follow {
				return followEvents(c, req, asJSON, keep)
			}
			events := func(cl *api.Client, ctx context.Context) (api.EventList, error) {
				l, err := cl.Events(ctx, req)
				l.Events = slices.DeleteFunc(l.Events, func(e event.Event) bool { return !keep(e.Kind) })
				return l, err
			}
			return ask(c, asJSON, events, func(l api.EventList) error {
				printEvents(c.stdout, l.Escaped().Events)
				if len(l.Events) == 0 {
					fmt.Fprintln(c.stdout, "no events")
				}
				if len(l.Missing) > 0 {
					fmt.Fprintf(c.stderr, "not listed (no answer): %s\n", safe(strings.Join(l.Missing, ", ")))
				}
				if l.Truncated {
					fmt.Fprintln(c.stderr, "the list stops at 5000 events per node: ask for less with --since or --user")
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&req.Since, "since", "24h", "how far back, e.g. 30m, 2h, 7d")
	cmd.Flags().StringVar(&req.User, "user", "", "only the events about (or done by) this user")
	cmd.Flags().BoolVarP(&req.Follow, "follow", "f", false, "keep printing new events as they happen (Ctrl-C ends)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON (with --follow: one event per line)")
	cmd.Flags().StringSliceVar(&kinds, "kind", nil, "only events of these kinds (comma-separated); a prefix ending in - takes a family: svc-, queue-, agent-")
	return cmd
}

// kindFilter reads --kind: the kinds to keep, each a kind or a family's
// prefix ("svc-"); none keeps every event.
func kindFilter(kinds []string) (func(event.EventKind) bool, error) {
	if len(kinds) == 0 {
		return func(event.EventKind) bool { return true }, nil
	}
	var exact, prefixes []string
	for _, k := range kinds {
		k = strings.TrimSpace(k)
		switch {
		case strings.HasSuffix(k, "-") && slices.ContainsFunc(event.EventKinds(), func(x event.EventKind) bool { return strings.HasPrefix(string(x), k) }):
			prefixes = append(prefixes, k)
		case slices.Contains(event.EventKinds(), event.EventKind(k)):
			exact = append(exact, k)
		default:
			return nil, fmt.Errorf("--kind %s: no such kind of event; give one of %s, or a family such as svc-", termsafe.String(k), kindList())
		}
	}
	return func(k event.EventKind) bool {
		return slices.Contains(exact, string(k)) || slices.ContainsFunc(prefixes, func(p string) bool { return strings.HasPrefix(string(k), p) })
	}, nil
}

func kindList() string {
	var ks []string
	for _, k := range event.EventKinds() {
		ks = append(ks, string(k))
	}
	return strings.Join(ks, ", ")
}

// followEvents prints events as they come until Ctrl-C.
func followEvents(c *cli, req api.EventsRequest, asJSON bool, keep func(event.EventKind) bool) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	evs, errf := c.client().FollowEvents(ctx, req)
	for e := range evs {
		if !keep(e.Kind) {
			continue
		}
		if asJSON {
			b, err := json.Marshal(e)
			if err != nil {
				return err
			}
			c.stdout.Write(append(termsafe.JSON(b), '\n'))
			continue
		}
		printEvents(c.stdout, []event.Event{api.EscapedEvent(e)})
	}
	if err := errf(); err != nil && ctx.Err() == nil {
		return err
	}
	return nil
}

// printEvents prints events one per line: when, where, what kind, what
// happened. The events are escaped already.
func printEvents(w io.Writer, evs []event.Event) {
	for _, e := range evs {
		fmt.Fprintf(w, "%s  %-8s %-13s %s\n", e.At.Local().Format("Jan 02 15:04:05"), columns.Clip(e.Node, 8), e.Kind, e.Text)
	}
}

func notifyCmd(c *cli) *cobra.Command {
	var req api.NotifyRequest
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "notify [--webhook URL | --off] [--test]",
		Short: "How dibs tells you: your tmux sessions, your boards, and a webhook of your own",
		Long: `dibs tells you what concerns you (your queued run started, your lease ends in
10 minutes and in 1, your lease ended and why, someone runs on your GPU, your
idle GPU is being reclaimed, your job finished or failed) in every tmux session
you have on every node (attached now, or at your next attach), on your open
boards (with the terminal's bell and a desktop notification), and, if you set
one, by a webhook: Slack, Discord and Mattermost incoming webhooks take
--format json, ntfy takes --format text.

The agent, which runs as root, posts to the address you give: it sends only
your notices, follows no redirect, never shows you what the server answered
(only "HTTP 404", "timed out", ...), and refuses link-local addresses (a cloud's
metadata service). Failed posts are tried again for a few minutes; what still
failed shows here.`,
		Example: `  dibs notify --webhook https://hooks.slack.com/services/T000/B000/XXXX
  dibs notify --webhook https://ntfy.sh/my-secret-topic
  dibs notify --test
  dibs notify --off`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
			defer cancel()
			st, err := c.client().Notify(ctx, req)
			if err != nil {
				return err
			}
			if asJSON {
				return printJSON(c.stdout, st)
			}
			printNotify(c.stdout, st, req)
			if st.Test != nil && st.Test.WebhookErr != "" {
				return &exitError{code: 1}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&req.Webhook, "webhook", "", "post your notices to this address (kept on this node)")
	cmd.Flags().StringVar(&req.Format, "format", "", "json (Slack, Discord, Mattermost) or text (ntfy); default: text for ntfy addresses, else json")
	cmd.Flags().BoolVar(&req.Off, "off", false, "stop posting to your webhook")
	cmd.Flags().BoolVar(&req.Test, "test", false, "send a test notice everywhere dibs would tell you")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// printNotify says how the caller hears of things. Everything from the
// agent is escaped.
func printNotify(w io.Writer, st api.NotifyStatus, req api.NotifyRequest) {
	switch {
	case req.Off:
		fmt.Fprintln(w, "webhook off")
	case req.Webhook != "" && st.Webhook != nil:
		fmt.Fprintf(w, "webhook set: dibs posts your notices to %s\n", safe(shortURL(st.Webhook.URL)))
	}
	fmt.Fprintln(w, "tmux: every session you have on every node (attached now, or at your next attach)")
	fmt.Fprintln(w, "board: the status line, the terminal's bell and a desktop notification")
	if st.Webhook == nil {
		fmt.Fprintln(w, "webhook: none (`dibs notify --webhook URL` sets one)")
	} else {
		fmt.Fprintf(w, "webhook: %s (%s), kept on %s since %s\n", safe(shortURL(st.Webhook.URL)), safe(st.Webhook.Format), safe(st.Node), st.Webhook.SetAt.Local().Format("Mon Jan 2 15:04"))
		if !st.LastOK.IsZero() {
			fmt.Fprintf(w, "  last delivered %s\n", st.LastOK.Local().Format("Mon Jan 2 15:04:05"))
		}
		if st.Pending > 0 {
			fmt.Fprintf(w, "  %d notices waiting to be delivered (retrying)\n", st.Pending)
		}
		if len(st.Also) > 0 {
			fmt.Fprintf(w, "  also kept on %s (set there while this node was away): `dibs notify --webhook URL` again keeps one\n", safe(strings.Join(st.Also, ", ")))
		}
	}
	for _, f := range st.Failures {
		fmt.Fprintf(w, "  failed %s on %s after %d tries: %s — %q\n", f.At.Local().Format("Jan 2 15:04"), safe(f.Node), f.Attempts, safe(f.Err), safe(f.Text))
	}
	if t := st.Test; t != nil {
		fmt.Fprintf(w, "test notice: shown in %d tmux clients now, waiting in %d detached sessions\n", t.Shown, t.Later)
		switch {
		case !t.Webhook:
		case t.WebhookErr != "":
			fmt.Fprintf(w, "test webhook post failed: %s\n", safe(t.WebhookErr))
		default:
			fmt.Fprintln(w, "test webhook post: delivered")
		}
	}
	if len(st.Missing) > 0 {
		fmt.Fprintf(w, "no answer from %s\n", safe(strings.Join(st.Missing, ", ")))
	}
}

// shortURL shows a webhook by its host: the rest is often a secret.
func shortURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" {
		return "(a webhook)"
	}
	return u.Scheme + "://" + u.Host + "/…"
}
