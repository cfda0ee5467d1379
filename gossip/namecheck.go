package gossip

import (
	"bufio"
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"time"
)

// Telling a wrong cluster name from a wrong key.
//
// memberlist drops a stream labelled for another cluster by closing it, so
// the agent that dialed sees only EOF, while a wrong key gets an answer it
// cannot decrypt. To let the joining side say which it is, the accepting
// side reads the label header itself before memberlist does and, when it
// names another cluster, first writes back a short notice carrying its own
// cluster name; the dialing side recognises the notice as the first byte of
// the answer and fails the read with a NameMismatchError, which memberlist
// passes up as the join's error. The label travels in clear in every packet
// already, so saying it back to whoever connects reveals nothing new. The
// stream then goes to memberlist as before, which drops and counts it.

// noticeMagic starts a cluster-name notice. memberlist's message types are
// small numbers and its label header is 244; nothing memberlist sends first
// on a stream is 245.
const noticeMagic = 0xF5

// noticePrefix follows noticeMagic; then the quoted name and a newline.
const noticePrefix = "dibs cluster "

// maxNotice bounds a notice: the magic, the prefix, a quoted name of up to
// 64 characters (a few escaped) and the newline.
const maxNotice = 1 + len(noticePrefix) + 2 + 4*64 + 1

// labelMsg is memberlist's label header type (label.go).
const labelMsg = 244

// NameMismatchError is why a stream to another agent failed: that agent is
// in a cluster of another name. Join errors carry its text.
type NameMismatchError struct {
	Theirs, Ours string
}

func (e *NameMismatchError) Error() string {
	return fmt.Sprintf("that agent's cluster name is %q, this one's is %q: give every agent the same cluster name", e.Theirs, e.Ours)
}

// encodeNotice is the notice an agent named ours writes on a stream
// labelled for another cluster.
func encodeNotice(ours string) []byte {
	return append([]byte{noticeMagic}, noticePrefix+strconv.Quote(ours)+"\n"...)
}

// parseNotice reads the cluster name out of a notice.
func parseNotice(b []byte) (string, bool) {
	if len(b) == 0 || b[0] != noticeMagic {
		return "", false
	}
	s, ok := strings.CutPrefix(string(b[1:]), noticePrefix)
	if !ok {
		return "", false
	}
	s, _, ok = strings.Cut(s, "\n")
	if !ok {
		return "", false
	}
	name, err := strconv.Unquote(s)
	if err != nil || !validToken(name, 64) {
		return "", false
	}
	return name, true
}

// streamLabel reads the label header a dialing memberlist sends first on a
// stream, without consuming it: the bytes stay in r for memberlist.
// A stream without a header has the empty label.
func streamLabel(r *bufio.Reader) (string, error) {
	b, err := r.Peek(1)
	if err != nil {
		return "", err
	}
	if b[0] != labelMsg {
		return "", nil
	}
	if b, err = r.Peek(2); err != nil {
		return "", err
	}
	n := int(b[1])
	if b, err = r.Peek(2 + n); err != nil {
		return "", err
	}
	return string(b[2:]), nil
}

// screenedConn is an accepted stream whose first bytes were read to find
// its label (and perhaps its first frame); reads return them again before
// the rest.
type screenedConn struct {
	net.Conn
	r io.Reader
	// label is what the stream's label header says; hasLabel is false when
	// the first byte was not one.
	label    string
	hasLabel bool
	// br is the reader the label was peeked from, while nothing past it
	// has been read.
	br *bufio.Reader
}

func (c *screenedConn) Read(b []byte) (int, error) { return c.r.Read(b) }

// screen reads an accepted stream's label and, when it names another
// cluster than ours, writes the notice. It waits at most timeout for the
// header, or until ctx ends, and returns the stream for memberlist with
// every byte it read still to be read. A stream that sends nothing in time
// (or ends first) is not a peer's, and is reported not ok: memberlist's
// dialer always speaks first.
func screen(ctx context.Context, conn net.Conn, ours string, timeout time.Duration) (*screenedConn, bool) {
	r := bufio.NewReaderSize(conn, 2+255)
	_ = conn.SetReadDeadline(time.Now().Add(timeout))
	stop := context.AfterFunc(ctx, func() { _ = conn.SetReadDeadline(time.Now()) })
	label, err := streamLabel(r)
	stop()
	_ = conn.SetReadDeadline(time.Time{})
	if err == nil && label != ours {
		_ = conn.SetWriteDeadline(time.Now().Add(timeout))
		_, _ = conn.Write(encodeNotice(ours))
		_ = conn.SetWriteDeadline(time.Time{})
	}
	if err != nil && r.Buffered() == 0 {
		return nil, false
	}
	return &screenedConn{Conn: conn, r: r, br: r, label: label, hasLabel: err == nil && label != ""}, true
}

// encryptFrame is memberlist's type byte for an encrypted frame (net.go's
// encryptMsg): [10] [length: uint32] [version, nonce, ciphertext, tag],
// with the type, length and label as additional data.
const encryptFrame = 10

// provesKey reads a labelled stream's first frame, waiting at most timeout,
// and reports whether it decrypts with one of keys and this cluster's label
// as its additional data: only an agent holding the key can send one.
// Whatever it read stays in c for memberlist. A frame larger than
// maxProofFrame is not read (reported false), nor is anything when keys is
// empty (insecure: nothing to prove).
func provesKey(c *screenedConn, keys [][]byte, label string, timeout time.Duration) bool {
	if len(keys) == 0 || !c.hasLabel || c.label != label || c.br == nil {
		return false
	}
	hl := 2 + len(label)
	_ = c.Conn.SetReadDeadline(time.Now().Add(timeout))
	defer func() { _ = c.Conn.SetReadDeadline(time.Time{}) }()
	head, err := c.br.Peek(hl + 5)
	if err != nil || head[hl] != encryptFrame {
		return false
	}
	n := int(binary.BigEndian.Uint32(head[hl+1:]))
	if n > maxProofFrame || n < 1+12+16 {
		return false
	}
	buf := make([]byte, hl+5+n)
	got, err := io.ReadFull(c.br, buf)
	buf = buf[:got]
	c.r, c.br = io.MultiReader(bytes.NewReader(buf), c.br), nil
	if err != nil {
		return false
	}
	frame := buf[hl:]
	ad := append(append([]byte(nil), frame[:5]...), label...)
	body := frame[5:]
	if body[0] > 1 { // memberlist's encryption versions are 0 and 1
		return false
	}
	for _, k := range keys {
		block, err := aes.NewCipher(k)
		if err != nil {
			continue
		}
		gcm, err := cipher.NewGCM(block)
		if err != nil {
			continue
		}
		if _, err := gcm.Open(nil, body[1:13], body[13:], ad); err == nil {
			return true
		}
	}
	return false
}

// dialedConn is a stream this agent opened. The first read looks for a
// cluster-name notice and turns it into a NameMismatchError.
type dialedConn struct {
	net.Conn
	ours    string
	checked bool
}

func (c *dialedConn) Read(b []byte) (int, error) {
	if c.checked || len(b) == 0 {
		return c.Conn.Read(b)
	}
	c.checked = true
	n, err := c.Conn.Read(b)
	if n == 0 || b[0] != noticeMagic {
		return n, err
	}
	got := append([]byte(nil), b[:n]...)
	var more [64]byte
	for err == nil && len(got) < maxNotice && bytes.IndexByte(got, '\n') < 0 {
		var m int
		m, err = c.Conn.Read(more[:])
		got = append(got, more[:m]...)
	}
	if theirs, ok := parseNotice(got); ok {
		return 0, &NameMismatchError{Theirs: theirs, Ours: c.ours}
	}
	return 0, fmt.Errorf("the agent answered with a malformed cluster-name notice")
}

// joinProblem turns memberlist's error for a join of one peer into one line
// that says what is wrong and what to do. memberlist wraps it in a
// multi-line "1 error occurred:" list and in "failed to join ADDR: ".
func joinProblem(err error) string {
	s := err.Error()
	if i := strings.Index(s, "failed to join "); i >= 0 {
		s = s[i+len("failed to join "):]
		if j := strings.Index(s, ": "); j >= 0 {
			s = s[j+2:]
		}
	}
	s = strings.Join(strings.Fields(s), " ")
	low := strings.ToLower(s)
	switch {
	case strings.Contains(s, "cluster name is"):
		return s
	case strings.Contains(low, "no installed keys could decrypt"):
		return "that agent's cluster key differs from this one's (its answer did not decrypt): give every node the same key file"
	case strings.Contains(low, "encryption is configured but remote state is not encrypted"):
		return "that agent runs without a cluster key (insecure) and this one has one: give every node the same key file"
	case strings.Contains(low, "remote state is encrypted and encryption is not configured"):
		return "that agent has a cluster key and this one runs without (insecure): give this node the cluster's key file"
	case strings.Contains(low, "connection refused"):
		return "nothing listens there (connection refused): is its agent running, on that port, and does its firewall let gossip in (TCP and UDP)?"
	case strings.Contains(low, "i/o timeout") || strings.Contains(low, "no route to host"):
		return s + ": no answer; is the node up, and does a firewall between them let gossip through (TCP and UDP)?"
	case s == "EOF":
		return "the other side closed the connection without an answer: an older dibs with another cluster name, or not a dibs agent"
	}
	return s
}
