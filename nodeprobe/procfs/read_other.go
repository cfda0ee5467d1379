//go:build !linux

package procfs

import (
	"errors"
	"io"
	"os"
)

// readSmall reads up to len(buf) bytes of a file. Only Linux has the procfs
// the callers read; this keeps the package building elsewhere.
func readSmall(path string, buf []byte) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := io.ReadFull(f, buf)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) && !errors.Is(err, io.EOF) {
		return n, err
	}
	return n, nil
}
