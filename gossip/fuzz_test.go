package gossip

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"testing"
	"time"
)

// Fuzz targets for every decoder. Each is seeded with real encoded messages;
// run one with, e.g.:
//
//	go test ./gossip -run '^$' -fuzz '^FuzzDecodeMessage$' -fuzztime 20s
//
// Every target checks that decoding never panics, that whatever decodes
// also validates, and that it encodes back to something that decodes the
// same.

func addSeeds(f *testing.F, types ...messageType) {
	for _, b := range sampleMessages(f) {
		if len(types) == 0 {
			f.Add(b)
			continue
		}
		for _, t := range types {
			if messageType(b[0]) == t {
				f.Add(b)
			}
		}
	}
	for _, b := range hostileMessages(f) {
		if len(types) == 0 || slices.Contains(types, messageType(b[0])) {
			f.Add(b)
		}
	}
	f.Add([]byte{})
	f.Add([]byte{byte(msgState), wireVersion, flagDeflate, 0xff})
}

// checkReencode encodes v as a message of type t and checks it decodes to
// the same value again.
func checkReencode(t *testing.T, mt messageType, v any, decode func([]byte) (any, error)) {
	b, err := encodeMessage(mt, v)
	if err != nil {
		// A value decoded within the limits can still grow on re-encoding
		// (escaping); that is not a decoder bug.
		return
	}
	again, err := decode(b)
	if err != nil {
		t.Fatalf("re-encoded %s does not decode: %v", mt, err)
	}
	j1, _ := json.Marshal(v)
	j2, _ := json.Marshal(again)
	if !bytes.Equal(j1, j2) {
		t.Fatalf("%s changed over a round trip:\n%s\n%s", mt, j1, j2)
	}
}

func FuzzDecodeMessage(f *testing.F) {
	addSeeds(f)
	f.Fuzz(func(t *testing.T, b []byte) {
		d, err := decodeMessage(b)
		if err != nil {
			return
		}
		if d.Type != messageType(b[0]) {
			t.Fatalf("type %v from a %d message", d.Type, b[0])
		}
		if d.State != nil {
			if err := d.State.validate(); err != nil {
				t.Fatalf("decoded state does not validate: %v", err)
			}
		}
		// Nothing a peer sends reaches the agent able to drive a terminal.
		checkAllClean(t, reflect.ValueOf(d), "message")
	})
}

func FuzzDecodeState(f *testing.F) {
	addSeeds(f, msgState)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeState(b)
		if err != nil {
			return
		}
		checkReencode(t, msgState, m, func(b []byte) (any, error) { return decodeState(b) })
	})
}

func FuzzDecodeLeave(f *testing.F) {
	addSeeds(f, msgLeave)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeLeave(b)
		if err != nil {
			return
		}
		checkReencode(t, msgLeave, m, func(b []byte) (any, error) { return decodeLeave(b) })
	})
}

func FuzzDecodeRequest(f *testing.F) {
	addSeeds(f, msgRequest)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeRequest(b)
		if err != nil {
			return
		}
		if _, err := replyNode(m); err == nil && m.Reply == "" {
			t.Fatal("empty reply address accepted")
		}
		checkReencode(t, msgRequest, m, func(b []byte) (any, error) { return decodeRequest(b) })
	})
}

func FuzzDecodeResponse(f *testing.F) {
	addSeeds(f, msgResponse)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeResponse(b)
		if err != nil {
			return
		}
		checkReencode(t, msgResponse, m, func(b []byte) (any, error) { return decodeResponse(b) })
	})
}

func FuzzDecodePushPull(f *testing.F) {
	addSeeds(f, msgPushPull)
	f.Fuzz(func(t *testing.T, b []byte) {
		m, states, err := decodePushPull(b)
		if err != nil {
			return
		}
		if len(states) != len(m.States) {
			t.Fatalf("%d states decoded of %d", len(states), len(m.States))
		}
		for _, s := range states {
			if err := s.validate(); err != nil {
				t.Fatalf("push/pull state does not validate: %v", err)
			}
		}
	})
}

func FuzzDecodeMeta(f *testing.F) {
	f.Add(nodeMeta{WireMin: 1, WireMax: 1, BootedAt: time.Unix(0, 1740830400123456789), BootID: "0a1b2c3d4e5f6071"}.encode())
	f.Add(nodeMeta{WireMin: 1, WireMax: 4, BootedAt: time.Unix(0, 0), BootID: "x"}.encode())
	f.Add(nodeMeta{WireMin: 2, WireMax: 2, BootedAt: time.Unix(0, 0), BootID: "ab"}.withProtocols(6, 7).encode())
	f.Add(v010Meta("0a1b2c3d"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeMeta(b)
		if err != nil {
			return
		}
		again, err := decodeMeta(m.encode())
		m.Version = metaVersion // encode writes this agent's meta version; the rest must survive
		if err != nil || again != m {
			t.Fatalf("meta %+v re-decodes as %+v, %v", m, again, err)
		}
	})
}

func FuzzParseKey(f *testing.F) {
	f.Add([]byte(EncodeKey(testKey)))
	f.Add(testKey)
	f.Add([]byte("  " + EncodeKey(testKey) + "\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		k, err := ParseKey(b)
		if err != nil {
			return
		}
		if len(k) != KeySize {
			t.Fatalf("ParseKey gave %d bytes", len(k))
		}
	})
}
