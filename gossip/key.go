package gossip

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"os"
)

// KeySize is the length of a cluster key: AES-256.
const KeySize = 32

// maxKeyFile bounds what ReadKeyFile reads; a key file is tiny, and a
// larger file is a mistake (a key pasted into the wrong place, a path to a
// log).
const maxKeyFile = 4 << 10

// GenerateKey returns a new random cluster key, for `dibs keygen`. Write it
// out with EncodeKey.
func GenerateKey() ([]byte, error) {
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		return nil, fmt.Errorf("generate cluster key: %w", err)
	}
	return k, nil
}

// EncodeKey is the text form of a key that ReadKeyFile accepts: standard
// base64, as `dibs keygen` prints it.
func EncodeKey(key []byte) string { return base64.StdEncoding.EncodeToString(key) }

// ReadKeyFile reads a cluster key from a file that holds either the 32 raw
// bytes or their base64 text (standard or URL alphabet, padded or not,
// surrounded by whitespace). Anything else is refused, so a truncated or
// wrong file never becomes a weak key.
func ReadKeyFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read cluster key: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxKeyFile+1))
	if err != nil {
		return nil, fmt.Errorf("read cluster key %s: %w", path, err)
	}
	k, err := ParseKey(data)
	if err != nil {
		return nil, fmt.Errorf("read cluster key %s: %w", path, err)
	}
	return k, nil
}

// ParseKey is ReadKeyFile without the file: it accepts 32 raw bytes or
// their base64 text.
func ParseKey(data []byte) ([]byte, error) {
	if len(data) > maxKeyFile {
		return nil, fmt.Errorf("key is over %d bytes: a cluster key is %d bytes, or 44 characters of base64; make one with `dibs keygen`", maxKeyFile, KeySize)
	}
	text := bytes.TrimSpace(data)
	decoded := -1 // length of the key the text encodes, if it is base64
	for _, enc := range []*base64.Encoding{base64.StdEncoding, base64.RawStdEncoding, base64.URLEncoding, base64.RawURLEncoding} {
		k := make([]byte, enc.DecodedLen(len(text)))
		n, err := enc.Decode(k, text)
		if err == nil && n == KeySize {
			return k[:n], nil
		}
		if err == nil && len(text) > 0 {
			decoded = n
		}
	}
	if decoded >= 0 {
		// 32 random bytes are all base64 characters with odds of 4^-32:
		// this is the text of a key of the wrong size, not a raw key.
		return nil, fmt.Errorf("key is the base64 text of %d bytes, not %d: make one with `dibs keygen`", decoded, KeySize)
	}
	if len(data) == KeySize {
		return bytes.Clone(data), nil
	}
	return nil, fmt.Errorf("key is neither %d raw bytes nor their base64 text (%d bytes given): make one with `dibs keygen`", KeySize, len(data))
}
