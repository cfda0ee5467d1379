package daemoncmd

import (
	"fmt"
	"io"
	"log/slog"

	"github.com/dibs-gpu/dibs/base/termsafe"
)

// newLogger builds the agent's structured log: JSON lines with
// --log-format json; else text, without timestamps when systemd's journal
// reads it (it adds its own), with them on a terminal or in a file.
//
// Every string value is escaped (termsafe): log lines carry user and process
// names and peers' messages, and reading the log must not drive the
// terminal.
func newLogger(w io.Writer, format string, getenv func(string) string) (*slog.Logger, error) {
	underSystemd := getenv("JOURNAL_STREAM") != "" || getenv("INVOCATION_ID") != ""
	opts := &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
		if len(groups) == 0 && a.Key == slog.TimeKey && underSystemd && format != "json" {
			return slog.Attr{}
		}
		if a.Value.Kind() == slog.KindString {
			a.Value = slog.StringValue(termsafe.String(a.Value.String()))
		}
		return a
	}}
	switch format {
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	case "", "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: use text or json", format)
}
