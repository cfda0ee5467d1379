// Package warnonce logs a problem the first time it is seen, for the probe
// backends: a probe loop running every second must not repeat the same
// complaint forever.
package warnonce

// maxKeys bounds what a Warner remembers; past it, it forgets and may
// repeat a line, rather than grow for the life of the agent.
const maxKeys = 1024

// Warner logs each distinct problem once. The zero value with Logf set is
// ready to use; it is not safe for concurrent use (each probe owns one).
type Warner struct {
	// Logf receives the lines; it must not be nil.
	Logf func(format string, args ...any)
	seen map[string]struct{}
}

// Warn logs format and args through Logf unless key was seen before.
func (w *Warner) Warn(key, format string, args ...any) {
	if _, ok := w.seen[key]; ok {
		return
	}
	if w.seen == nil || len(w.seen) >= maxKeys {
		w.seen = make(map[string]struct{})
	}
	w.seen[key] = struct{}{}
	w.Logf(format, args...)
}
