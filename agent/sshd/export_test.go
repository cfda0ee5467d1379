package sshd

// SetHook makes the front door started with d call f at the start of each
// of its callbacks (admit, auth, authenticated, session, program), so a
// test can make one of them panic.
func SetHook(d *Deps, f func(where string)) { d.hook = f }
