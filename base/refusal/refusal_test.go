package refusal

import (
	"encoding/json"
	"errors"
	"io/fs"
	"testing"
)

// A refusal built from an error keeps that error underneath it, so callers
// can still ask errors.Is and errors.As about the cause, while the refusal's
// own code and words are what a person (and a peer) sees.
func TestRefusalKeepsItsCause(t *testing.T) {
	cause := &fs.PathError{Op: "open", Path: "/var/lib/dibs", Err: fs.ErrPermission}
	for _, tc := range []struct {
		name string
		err  error
		code Code
		msg  string
	}{
		{"Wrap", Wrap(CodeUnavailable, cause), CodeUnavailable, "open /var/lib/dibs: permission denied"},
		{"Wrapf", Wrapf(CodeInvalid, cause, "lease %s: %v", "n1-7", cause), CodeInvalid, "lease n1-7: open /var/lib/dibs: permission denied"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := CodeOf(tc.err); got != tc.code {
				t.Errorf("CodeOf = %q, want %q", got, tc.code)
			}
			if tc.err.Error() != tc.msg {
				t.Errorf("message %q, want %q", tc.err.Error(), tc.msg)
			}
			if !errors.Is(tc.err, fs.ErrPermission) {
				t.Errorf("errors.Is(refusal, fs.ErrPermission) = false: the refusal lost its cause")
			}
			var pe *fs.PathError
			if !errors.As(tc.err, &pe) || pe.Path != "/var/lib/dibs" {
				t.Errorf("errors.As(refusal, *fs.PathError) = %v, %v: the refusal lost its cause", pe != nil, pe)
			}
		})
	}
	// A refusal over a refusal answers with the outer code, as CodeOf always did.
	inner := Invalidf("bad GPU 9")
	if got := CodeOf(Wrapf(CodeUnavailable, inner, "node01: %v", inner)); got != CodeUnavailable {
		t.Errorf("CodeOf(outer) = %q, want %q", got, CodeUnavailable)
	}
}

// The cause is this process's own: a refusal encodes to the same JSON with or
// without one, so nothing new goes on the wire.
func TestRefusalCauseIsNotSerialised(t *testing.T) {
	plain, err := json.Marshal(&Error{Code: CodeInvalid, Msg: "boom"})
	if err != nil {
		t.Fatal(err)
	}
	wrapped, err := json.Marshal(Wrapf(CodeInvalid, errors.New("secret cause"), "boom"))
	if err != nil {
		t.Fatal(err)
	}
	if string(plain) != string(wrapped) || string(plain) != `{"Code":"invalid","Msg":"boom"}` {
		t.Errorf("wrapped refusal encodes as %s, plain as %s: want both %s", wrapped, plain, `{"Code":"invalid","Msg":"boom"}`)
	}
}
