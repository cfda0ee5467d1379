package lease_test

import (
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/lease"
)

// TestClaimNoteRefusals: a note is one short line of plain text, checked
// once, where the claim is made (Claim.Validate; the planner trusts it),
// and the refusal says what is wrong and where.
func TestClaimNoteRefusals(t *testing.T) {
	tests := []struct {
		name  string
		claim lease.Claim
		code  refusal.Code // the refusal
		msg   []string     // and what it must say
	}{
		{name: "note too long", claim: lease.Claim{Count: 1, Note: strings.Repeat("x", words.MaxNoteLen+1)},
			code: refusal.CodeInvalid, msg: []string{"note is 201 bytes", "200 at most"}},
		{name: "note on two lines", claim: lease.Claim{Count: 1, Note: "ablation\nrun 2"},
			code: refusal.CodeInvalid, msg: []string{"one line"}},
		{name: "note with a terminal escape", claim: lease.Claim{Count: 1, Note: "run \x1b]0;pwned\x07"},
			code: refusal.CodeInvalid, msg: []string{"plain text"}},
		{name: "note with a NUL", claim: lease.Claim{Count: 1, Note: "a\x00b"},
			code: refusal.CodeInvalid, msg: []string{"plain text"}},
		{name: "note not UTF-8", claim: lease.Claim{Count: 1, Note: "caf\xe9"},
			code: refusal.CodeInvalid, msg: []string{"plain text"}},
		{name: "note with a right-to-left override", claim: lease.Claim{Count: 1, Note: "fix \u202eexe.txt"},
			code: refusal.CodeInvalid, msg: []string{"note holds U+202E RIGHT-TO-LEFT OVERRIDE", "at byte 4", "remove it"}},
		{name: "note with a zero-width space", claim: lease.Claim{Count: 1, Note: "ab\u200bc"},
			code: refusal.CodeInvalid, msg: []string{"note holds U+200B ZERO WIDTH SPACE", "remove it"}},
		{name: "note with a C1 CSI", claim: lease.Claim{Count: 1, Note: "x\u009b2J"},
			code: refusal.CodeInvalid, msg: []string{"U+009B", "remove it"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.claim.Validate()
			if err == nil {
				t.Fatalf("Validate accepted the note %q; want a refusal", tt.claim.Note)
			}
			if got := refusal.CodeOf(err); got != tt.code {
				t.Errorf("code = %q, want %q (%v)", got, tt.code, err)
			}
			for _, m := range tt.msg {
				if !strings.Contains(err.Error(), m) {
					t.Errorf("refusal %q does not say %q", err, m)
				}
			}
		})
	}
}
