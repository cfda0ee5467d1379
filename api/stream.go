package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
)

// stream is one of the agent's NDJSON streams (the board, the events): a
// request whose answer is one JSON value a line, for as long as it lasts.
type stream struct {
	method, path string
	body         []byte
	// buf is the channel's room; with latest, a reader that is behind
	// gets only the newest value (a board replaces the last one; events
	// never skip).
	buf    int
	latest bool
	// maxLine bounds one line; what names the stream in errors ("board").
	maxLine int
	what    string
}

// follow reads s into a channel of T, one value a line; a blank line (the
// agent's keep-alive) is skipped. The channel closes when ctx ends or the
// stream breaks; the error func then says why (nil after ctx ended). Both
// streams of the client read through it, so a line too long, a value that
// does not decode and an agent that stops say the same for each.
func follow[T any](ctx context.Context, c *Client, s stream) (<-chan T, func() error) {
	ch := make(chan T, s.buf)
	var werr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		defer close(ch)
		werr = readStream(ctx, c, s, func(v T) bool {
			if s.latest {
				select {
				case <-ch:
				default:
				}
			}
			select {
			case ch <- v:
				return true
			case <-ctx.Done():
				return false
			}
		})
	}()
	return ch, func() error { <-done; return werr }
}

// readStream hands each value of s to send until send says stop, ctx ends
// or the stream breaks, and says why it stopped (nil after ctx ended or
// send said stop).
func readStream[T any](ctx context.Context, c *Client, s stream, send func(T) bool) error {
	resp, err := c.roundTrip(ctx, s.method, s.path, s.body)
	if err != nil {
		if ctx.Err() == nil {
			return c.dialError(err)
		}
		return nil
	}
	defer resp.close()
	if resp.status != 200 {
		return decodeResponse(resp, nil)
	}
	sc := bufio.NewScanner(resp.body)
	sc.Buffer(make([]byte, 64<<10), s.maxLine)
	for sc.Scan() {
		if len(sc.Bytes()) == 0 {
			continue // the agent's keep-alive
		}
		var v T
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			return fmt.Errorf("decode %s stream: %w", s.what, err)
		}
		if !send(v) {
			return nil
		}
	}
	if err := sc.Err(); err != nil && ctx.Err() == nil {
		return fmt.Errorf("%s stream: %w", s.what, err)
	} else if ctx.Err() == nil {
		return fmt.Errorf("the agent closed the %s stream (did it stop?)", s.what)
	}
	return nil
}
