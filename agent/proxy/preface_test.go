package proxy

import (
	"bytes"
	"errors"
	"strings"
	"testing"
)

func TestPrefaceRoundTrip(t *testing.T) {
	for _, id := range []string{"node01-1", "gpu-box.lab-42", "a_b-18446744073709551615"} {
		b, err := EncodePreface(id)
		if err != nil {
			t.Fatalf("encode %q: %v", id, err)
		}
		// What follows the newline is the client's: the decoder leaves it.
		r := bytes.NewReader(append(b, "GET / HTTP/1.1\r\n"...))
		got, err := DecodePreface(r)
		if err != nil || got != id {
			t.Fatalf("decode of %q: %q, %v", b, got, err)
		}
		if r.Len() != len("GET / HTTP/1.1\r\n") {
			t.Fatalf("the decoder read %d bytes past the preface's newline", len("GET / HTTP/1.1\r\n")-r.Len())
		}
	}
}

func TestPrefaceRefusals(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "unexpected EOF"},
		{"dibs-proxy/1 node01-1", "unexpected EOF"},
		{"GET / HTTP/1.1\n", `not "dibs-proxy/1"`},
		{"dibs-proxy/2 node01-1\n", `not "dibs-proxy/1"`},
		{"dibs-proxy/1 \n", "lease id must be 1 to"},
		{"dibs-proxy/1 ../../etc\n", "no lease id has"},
		{"dibs-proxy/1 node 01\n", "no lease id has"},
		{"dibs-proxy/1 \x1b[2J\n", "no lease id has"},
		{"dibs-proxy/1 " + strings.Repeat("a", 200) + "\n", "longer than"},
		{strings.Repeat("x", 10<<20), "longer than"},
	} {
		r := bytes.NewReader([]byte(tc.in))
		_, err := DecodePreface(r)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%.40q: %v, want an error with %q", tc.in, err, tc.want)
		}
		if read := len(tc.in) - r.Len(); read > MaxLine {
			t.Errorf("%.40q: read %d bytes, more than the bound %d", tc.in, read, MaxLine)
		}
	}
	if _, err := EncodePreface("no spaces please"); err == nil {
		t.Error("a lease id with spaces was encoded")
	}
}

func TestAnswerRoundTrip(t *testing.T) {
	if err := readAnswer(bytes.NewReader(answer(nil))); err != nil {
		t.Fatalf("ok read as %v", err)
	}
	long := errors.New(strings.Repeat("the listener is not the owner's\n", 20))
	b := answer(long)
	if len(b) > MaxLine || bytes.Count(b, []byte("\n")) != 1 {
		t.Fatalf("a refusal's answer is %d bytes with %d newlines: want one line of at most %d", len(b), bytes.Count(b, []byte("\n")), MaxLine)
	}
	if err := readAnswer(bytes.NewReader(b)); err == nil || !strings.Contains(err.Error(), "backend refused: the listener is not the owner's") {
		t.Fatalf("refusal read as %v", err)
	}
}

// FuzzDecodePreface feeds the backend's decoder what anyone on the
// network may send to the backend port: it never panics, never reads
// beyond MaxLine bytes nor past the newline, and what it accepts encodes
// back to the very bytes it read.
func FuzzDecodePreface(f *testing.F) {
	for _, s := range []string{
		"dibs-proxy/1 node01-1\n",
		"dibs-proxy/1 node01-1\nGET / HTTP/1.1\r\n\r\n",
		"dibs-proxy/1 \n",
		"dibs-proxy/1 node01-1",
		"dibs-proxy/1 n\x00de01-1\n",
		"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
		"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
		strings.Repeat("dibs-proxy/1 ", 20),
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		r := bytes.NewReader(b)
		id, err := DecodePreface(r)
		read := len(b) - r.Len()
		if read > MaxLine {
			t.Fatalf("read %d bytes, past the bound %d", read, MaxLine)
		}
		if err != nil {
			return
		}
		enc, err := EncodePreface(id)
		if err != nil {
			t.Fatalf("accepted %q but cannot encode it: %v", id, err)
		}
		if !bytes.Equal(enc, b[:read]) {
			t.Fatalf("accepted %q from %q, which encodes as %q", id, b[:read], enc)
		}
	})
}
