package main

import (
	"fmt"
	"io"
	"log/slog"
)

// newLogger builds the agent's structured log: JSON lines with
// --log-format json; else text, without timestamps when systemd's journal
// reads it (it adds its own), with them on a terminal or in a file.
func newLogger(w io.Writer, format string, getenv func(string) string) (*slog.Logger, error) {
	opts := &slog.HandlerOptions{Level: slog.LevelInfo}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "", "text":
		if getenv("JOURNAL_STREAM") != "" || getenv("INVOCATION_ID") != "" {
			opts.ReplaceAttr = func(groups []string, a slog.Attr) slog.Attr {
				if len(groups) == 0 && a.Key == slog.TimeKey {
					return slog.Attr{}
				}
				return a
			}
		}
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}
