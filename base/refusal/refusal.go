// Package refusal is the refusal vocabulary of every dibs room: a Code the
// API maps to an HTTP status and the CLI to an exit code without parsing
// messages, and Error, the refusal a person reads, which keeps the error it
// was built from. It imports the standard library only, so every package,
// from the rules to the commands, may say "no" the same way.
package refusal

import (
	"errors"
	"fmt"
)

// Code classifies a refusal so the API can map it to a status and the CLI to
// an exit code without parsing messages.
type Code string

// Error is a refusal a person should read: Msg says what was wrong and what to
// do about it. Only Code and Msg travel: the cause is this process's own, kept
// so that errors.Is and errors.As still find what went wrong underneath.
type Error struct {
	Code Code
	Msg  string

	cause error // never serialised: unexported, and peers rebuild Code and Msg alone
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the error the refusal was built from (by Wrap or Wrapf), or
// nil, so a refusal does not hide its cause from errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.cause }

// Invalidf builds a CodeInvalid refusal.
func Invalidf(format string, args ...any) error {
	return &Error{Code: CodeInvalid, Msg: fmt.Sprintf(format, args...)}
}

// Wrap turns err into a refusal of code whose message is err's own, keeping
// err as its cause: use it where an error is already fit for a person to read.
func Wrap(code Code, err error) error {
	return &Error{Code: code, Msg: err.Error(), cause: err}
}

// Wrapf builds a refusal of code with the message format says and keeps cause
// as what it unwraps to, so the refusal's words are the caller's and the
// chain underneath survives (errors.Is(refusal, cause) holds).
func Wrapf(code Code, cause error, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), cause: cause}
}

// Errorf builds a refusal of code with the message format says.
func Errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the refusal code of err, or "" when err is not a refusal.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// Refusal codes.
const (
	CodeInvalid     Code = "invalid"     // the request itself is wrong
	CodeConflict    Code = "conflict"    // the GPUs are not free
	CodeNotFound    Code = "not_found"   // no such lease
	CodeForbidden   Code = "forbidden"   // not yours
	CodeUnavailable Code = "unavailable" // the agent cannot serve it now (disk full, node down)
	// CodeNoAnswer: the agent asked another, which did not answer in time,
	// so the request may or may not have been carried out there. A caller
	// must not take it for a refusal: retry with the same request id, or
	// look before acting again.
	CodeNoAnswer Code = "no_answer"
)
