package peer

import (
	"context"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/base/refusal"
)

// TestCallChecksOnce: a claim or a booking, validated by the edge that
// made it, goes to another node without being checked again, and that node
// refuses what is wrong with it as network input; every other request is
// checked before it leaves (the agent built it, or no edge checked it), and
// a call to this node, which decodes nothing, checks even a claim.
func TestCallChecksOnce(t *testing.T) {
	tests := []struct {
		name string
		// call makes one call from m to node.
		call func(m *Mux, node string) error
		node string
		// sent says whether the request left this agent; want is a part
		// of the refusal.
		sent bool
		want string
	}{
		{name: "a claim to another node: the receiver refuses it", node: "n2", sent: true, want: "claim request from n1: -g 1 and --ids 0 both say which GPUs",
			call: func(m *Mux, node string) error {
				_, err := Call(context.Background(), m, node, Claim, As("alice"), ClaimRequest{Count: 1, GPUs: []int{0}})
				return err
			}},
		{name: "a booking to another node: the receiver refuses it", node: "n2", sent: true, want: "book request from n1: -g 1 and --ids 0 both say which GPUs",
			call: func(m *Mux, node string) error {
				_, err := Call(context.Background(), m, node, Book, As("alice"), BookRequest{Count: 1, GPUs: []int{0}})
				return err
			}},
		{name: "a release to another node: refused before it leaves", node: "n2", sent: false, want: "is not a lease id",
			call: func(m *Mux, node string) error {
				_, err := Call(context.Background(), m, node, Release, As("alice"), ReleaseRequest{IDs: []string{"\x1b[2J"}})
				return err
			}},
		{name: "a system preemption to another node: refused before it leaves", node: "n2", sent: false, want: `unknown preemption reason "why not"`,
			call: func(m *Mux, node string) error {
				_, err := Call(context.Background(), m, node, Preempt, System, PreemptRequest{Lease: "n2-1", Reason: "why not"})
				return err
			}},
		{name: "a claim to this node: checked here", node: "n1", sent: false, want: "-g 1 and --ids 0 both say which GPUs",
			call: func(m *Mux, node string) error {
				_, err := Call(context.Background(), m, node, Claim, As("alice"), ClaimRequest{Count: 1, GPUs: []int{0}})
				return err
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var handled int
			serve := func(m *Mux) {
				accept(m, Claim, &handled)
				accept(m, Book, &handled)
				accept(m, Release, &handled)
				accept(m, Preempt, &handled)
			}
			m, other := NewMux("n1"), NewMux("n2")
			serve(m)
			serve(other)
			var sent []byte
			m.SetTransport(recorder{pipe: pipe{from: "n1", to: other}, sent: &sent})
			err := tt.call(m, tt.node)
			if err == nil || refusal.CodeOf(err) != refusal.CodeInvalid || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("call: %v (code %q); want an invalid refusal saying %q", err, refusal.CodeOf(err), tt.want)
			}
			if (sent != nil) != tt.sent {
				t.Errorf("sent %q; want sent %v", sent, tt.sent)
			}
			if handled != 0 {
				t.Errorf("a handler ran %d times for a refused request", handled)
			}
		})
	}
}
