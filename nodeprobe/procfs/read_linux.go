//go:build linux

package procfs

import "syscall"

// readSmall reads up to len(buf) bytes of a file with three system calls.
// os.Open adds several more (non-blocking setup, poller checks) that are
// most of a probe's cost when it attributes a dozen processes.
func readSmall(path string, buf []byte) (int, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, err
	}
	defer syscall.Close(fd)
	return ReadFD(fd, buf)
}

// ReadFD reads fd into buf until buf is full or the file ends, with bare
// read system calls (a read cut by a signal is tried again): for the small
// files of /proc and the status file a run leaves, read where os.File's
// poller would cost more than the read. It returns how many bytes it read,
// and those read before an error with the error.
func ReadFD(fd int, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := syscall.Read(fd, buf[n:])
		if err == syscall.EINTR {
			continue
		}
		if err != nil {
			return n, err
		}
		if m == 0 {
			break
		}
		n += m
	}
	return n, nil
}
