package proxy

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// byteReader reads a connection one byte at a time, so a line read from
// it takes nothing beyond its newline.
type byteReader struct{ r io.Reader }

func (b byteReader) ReadByte() (byte, error) {
	var one [1]byte
	for {
		n, err := b.r.Read(one[:])
		if n == 1 {
			return one[0], nil
		}
		if err != nil {
			return 0, err
		}
	}
}

// pipe copies a to b and b to a until both directions end, then closes
// both. A direction that ends cleanly (EOF) half-closes the other side's
// write, so a client that sends its request and shuts its write still
// reads the whole answer; an error in either direction closes both; a
// connection with no byte either way for idle is closed.
func pipe(a, b net.Conn, idle time.Duration) {
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	var once sync.Once
	closeBoth := func() {
		once.Do(func() {
			a.Close()
			b.Close()
		})
	}
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		t := time.NewTimer(idle)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			left := time.Until(time.Unix(0, last.Load()).Add(idle))
			if left <= 0 {
				closeBoth()
				return
			}
			t.Reset(left)
		}
	}()
	done := make(chan struct{}, 2)
	copyOne := func(dst, src net.Conn) {
		_, err := io.Copy(dst, activity{src, &last})
		if err != nil {
			closeBoth()
		} else {
			closeWrite(dst)
		}
		done <- struct{}{}
	}
	go copyOne(a, b)
	go copyOne(b, a)
	<-done
	<-done
	closeBoth()
}

// activity stamps last at every read, for pipe's idle watch.
type activity struct {
	c    net.Conn
	last *atomic.Int64
}

func (r activity) Read(b []byte) (int, error) {
	n, err := r.c.Read(b)
	if n > 0 {
		r.last.Store(time.Now().UnixNano())
	}
	return n, err
}

// closeWrite half-closes c's write side when it can (TCP), else closes it.
func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}
