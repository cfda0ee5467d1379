package proxy

import (
	"errors"
	"fmt"
	"io"
	"strings"
)

// The backend protocol, between one agent's proxy and the agent of the
// node where the chosen replica runs. The proxy opens a TCP connection to
// that agent's backend port and writes one line, the preface:
//
//	dibs-proxy/1 LEASE\n
//
// naming the replica's service lease. The backend answers with one line,
// "ok\n" when it has connected to the replica (owner-checked, over its
// own loopback), else "no REASON\n" and closes; after "ok" the bytes of
// both directions are the client's and the replica's. Both lines are
// bounded (MaxLine): the backend reads network input from anyone.

const (
	prefaceMagic = "dibs-proxy/1 "
	// MaxLine bounds the preface and the answer, newline included.
	MaxLine = 128
	// maxLeaseID bounds a lease id in a preface (a node name of at most
	// 63 characters, '-', a counter).
	maxLeaseID = MaxLine - len(prefaceMagic) - 1
)

// errLong is a line longer than MaxLine.
var errLong = errors.New("line longer than the backend protocol allows")

// EncodePreface is the preface naming lease id; id must pass checkLeaseID.
func EncodePreface(id string) ([]byte, error) {
	if err := checkLeaseID(id); err != nil {
		return nil, err
	}
	return []byte(prefaceMagic + id + "\n"), nil
}

// DecodePreface reads a preface from r, at most MaxLine bytes (never
// beyond its newline), and returns the lease it names.
func DecodePreface(r io.ByteReader) (string, error) {
	line, err := readLine(r)
	if err != nil {
		return "", fmt.Errorf("proxy preface: %w", err)
	}
	id, ok := strings.CutPrefix(line, prefaceMagic)
	if !ok {
		return "", fmt.Errorf("proxy preface: not %q", strings.TrimSpace(prefaceMagic))
	}
	if err := checkLeaseID(id); err != nil {
		return "", fmt.Errorf("proxy preface: %w", err)
	}
	return id, nil
}

// checkLeaseID accepts what a lease id may be: 1 to maxLeaseID letters,
// digits, '-', '_' and '.'.
func checkLeaseID(id string) error {
	if id == "" || len(id) > maxLeaseID {
		return fmt.Errorf("lease id must be 1 to %d characters", maxLeaseID)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.') {
			return errors.New("lease id holds a character no lease id has")
		}
	}
	return nil
}

// readLine reads one line of at most MaxLine bytes, newline included,
// and returns it without the newline. It reads byte by byte, so nothing
// beyond the newline is taken from r.
func readLine(r io.ByteReader) (string, error) {
	var b strings.Builder
	for b.Len() < MaxLine {
		c, err := r.ReadByte()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return "", err
		}
		if c == '\n' {
			return b.String(), nil
		}
		b.WriteByte(c)
	}
	return "", errLong
}

// answer is the backend's line: ok, or no with its reason cut to fit.
func answer(err error) []byte {
	if err == nil {
		return []byte("ok\n")
	}
	why := strings.Map(func(r rune) rune {
		if r < ' ' || r == 0x7f {
			return ' '
		}
		return r
	}, err.Error())
	if len(why) > MaxLine-4 {
		why = why[:MaxLine-4]
	}
	return []byte("no " + why + "\n")
}

// readAnswer reads the backend's answer: nil for ok, else its reason.
func readAnswer(r io.ByteReader) error {
	line, err := readLine(r)
	switch {
	case err != nil:
		return fmt.Errorf("backend answer: %w", err)
	case line == "ok":
		return nil
	}
	if why, ok := strings.CutPrefix(line, "no "); ok {
		return fmt.Errorf("backend refused: %s", why)
	}
	return errors.New("backend answer: not ok or no")
}
