package peer

import (
	"context"
	"reflect"
	"testing"
	"time"
)

// TestBookWire pins the book request's bytes now that it is the booking
// the edge made (lease.BookRequest): an agent of this release and one of
// v0.1.0's dialect (protocol 6, whose decoder refuses an unknown field)
// get what they always got, and the handler at the other end reads the
// booking as it was sent. The bytes are what peer.BookRequest, the copy
// this type replaced, wrote.
func TestBookWire(t *testing.T) {
	at := time.Date(2030, 1, 2, 9, 0, 0, 0, time.UTC)
	req := BookRequest{Count: 2, Start: at, Duration: 3 * time.Hour, Kind: "batch", Note: "deadline", Model: "H100", Tags: []string{"east"},
		Run:       &Run{Name: "train", Command: []string{"python", "train.py"}, Dir: "/home/bob", Env: map[string]string{"PATH": "/usr/bin"}},
		RequestID: "req-0123456789", Group: "node01-7"}
	v6 := req
	v6.Group = ""
	tests := []struct {
		name     string
		protocol int
		want     string
		// got is the booking the other agent's handler reads.
		got BookRequest
	}{
		{name: "protocol 7", protocol: 7, got: req,
			want: `{"v":7,"actor":{"user":"bob"},"req":{"count":2,"start":"2030-01-02T09:00:00Z","duration":10800000000000,"kind":"batch",` +
				`"note":"deadline","model":"H100","tags":["east"],"run":{"name":"train","command":["python","train.py"],"dir":"/home/bob",` +
				`"env":{"PATH":"/usr/bin"}},"request_id":"req-0123456789","group":"node01-7"}}`},
		{name: "protocol 6 (v0.1.0)", protocol: 6, got: v6,
			want: `{"v":6,"actor":{"user":"bob"},"req":{"count":2,"duration":10800000000000,"kind":"batch","model":"H100","note":"deadline",` +
				`"request_id":"req-0123456789","run":{"command":["python","train.py"],"dir":"/home/bob","env":{"PATH":"/usr/bin"},"name":"train"},` +
				`"start":"2030-01-02T09:00:00Z","tags":["east"]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			other := pinned(t, tt.protocol)
			var got []BookRequest
			Handle(other, Book, func(_ context.Context, _ string, _ Actor, r BookRequest) (LeaseReply, error) {
				got = append(got, r)
				return LeaseReply{Lease: sampleLease()}, nil
			})
			m := NewMux("n7")
			var sent []byte
			m.SetTransport(recorder{pipe: pipe{from: "n7", to: other}, sent: &sent})
			if _, err := Call(context.Background(), m, "n6", Book, As("bob"), req); err != nil {
				t.Fatalf("book at an agent of protocol %d: %v", tt.protocol, err)
			}
			if string(sent) != tt.want {
				t.Errorf("sent\n%s\nwant\n%s", sent, tt.want)
			}
			if len(got) != 1 || !reflect.DeepEqual(got[0], tt.got) {
				t.Errorf("the other agent read %+v; want %+v", got, tt.got)
			}
		})
	}
}
