package api

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"
)

// The client speaks just enough HTTP/1.1 to the agent's socket, without
// net/http: every `dibs` command is a fresh process, and linking net/http
// (with crypto/tls, x509 and HTTP/2, whose code and inits a plain-text
// unix socket never needs) made each one start measurably slower than
// SLURM's clients (docs/benchmarks.md). The requests are simple — a method,
// a path, a JSON body with its length — and each goes on a connection of
// its own, closed after the answer, so no pool and no pipelining are needed.
// The answers come from the agent's net/http server: a body with a
// Content-Length, or chunked for the streams (watch, events), or one that
// ends when the connection does.

// maxHeader bounds the status line and headers of an answer together.
const maxHeader = 64 << 10

// maxChunkLine bounds one chunk-size line of a chunked body (hex size and
// any extensions); net/http's own reader allows 4 KiB.
const maxChunkLine = 4 << 10

// response is the agent's answer as far as the client needs it.
type response struct {
	// status is the code, e.g. 404; statusText the line after the
	// protocol, e.g. "404 Not Found", for messages.
	status     int
	statusText string
	// body reads the body, de-chunked; it reports io.ErrUnexpectedEOF when
	// the connection ends before the body does.
	body io.Reader
	// close ends the connection (and the context watch).
	close func()
}

// roundTrip sends one request on a new connection to the agent (dialAgent
// checks it before a byte is written) and reads the answer's head. The
// caller reads resp.body and must call resp.close. Ending ctx closes the
// connection, which ends any read or write in progress; the error is then
// ctx's.
func (c *Client) roundTrip(ctx context.Context, method, path string, body []byte) (*response, error) {
	conn, err := dialAgent(ctx, c.socket)
	if err != nil {
		return nil, err
	}
	// A deadline in the past wakes any read or write at once; set only
	// after ctx has ended, so the error can always be reported as ctx's.
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	closeAll := func() {
		stop()
		conn.Close()
	}
	fail := func(err error) (*response, error) {
		closeAll()
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s %s: %w", method, path, ctx.Err())
		}
		return nil, err
	}
	var head bytes.Buffer
	head.Grow(160 + len(body))
	head.WriteString(method + " " + path + " HTTP/1.1\r\nHost: dibs\r\nUser-Agent: dibs\r\nConnection: close\r\n")
	if body != nil {
		head.WriteString("Content-Type: application/json\r\nContent-Length: " + strconv.Itoa(len(body)) + "\r\n")
	}
	head.WriteString("\r\n")
	head.Write(body)
	if _, err := conn.Write(head.Bytes()); err != nil {
		return fail(fmt.Errorf("send %s %s: %w", method, path, err))
	}
	resp, err := readResponse(bufio.NewReaderSize(conn, 8<<10))
	if err != nil {
		return fail(fmt.Errorf("read the answer to %s %s: %w", method, path, err))
	}
	resp.close = closeAll
	if ctx.Done() != nil {
		resp.body = &ctxReader{ctx: ctx, r: resp.body}
	}
	return resp, nil
}

// ctxReader reports ctx's error instead of the closed connection's once
// ctx has ended.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (r *ctxReader) Read(p []byte) (int, error) {
	n, err := r.r.Read(p)
	if err != nil && err != io.EOF && r.ctx.Err() != nil {
		err = r.ctx.Err()
	}
	return n, err
}

// errMalformed marks an answer that is not the HTTP the agent speaks.
var errMalformed = errors.New("malformed answer")

// readResponse reads an HTTP/1.x answer's status line and headers from br
// (bounded by maxHeader together) and returns its body reader: de-chunked,
// limited to its Content-Length, or to the end of the connection. Informational
// (1xx) answers before the real one are skipped.
func readResponse(br *bufio.Reader) (*response, error) {
	budget := maxHeader
	for {
		line, err := readLine(br, &budget)
		if err != nil {
			return nil, err
		}
		proto, rest, ok := strings.Cut(line, " ")
		if !ok || (proto != "HTTP/1.1" && proto != "HTTP/1.0") {
			return nil, fmt.Errorf("%w: status line %q", errMalformed, clip(line))
		}
		codeText, _, _ := strings.Cut(rest, " ")
		code, err := strconv.Atoi(codeText)
		if err != nil || len(codeText) != 3 || code < 100 {
			return nil, fmt.Errorf("%w: status line %q", errMalformed, clip(line))
		}
		length, chunked := int64(-1), false
		for {
			h, err := readLine(br, &budget)
			if err != nil {
				return nil, err
			}
			if h == "" {
				break
			}
			name, value, ok := strings.Cut(h, ":")
			if !ok {
				return nil, fmt.Errorf("%w: header line %q", errMalformed, clip(h))
			}
			value = strings.TrimSpace(value)
			switch {
			case strings.EqualFold(name, "Content-Length"):
				n, err := strconv.ParseInt(value, 10, 64)
				if err != nil || n < 0 || (length >= 0 && n != length) {
					return nil, fmt.Errorf("%w: Content-Length %q", errMalformed, clip(value))
				}
				length = n
			case strings.EqualFold(name, "Transfer-Encoding"):
				if !strings.EqualFold(value, "chunked") {
					return nil, fmt.Errorf("%w: Transfer-Encoding %q", errMalformed, clip(value))
				}
				chunked = true
			}
		}
		if code < 200 {
			continue // 100 Continue and the like: the answer follows
		}
		r := &response{status: code, statusText: rest}
		switch {
		case code == 204 || code == 304:
			r.body = eofReader{}
		case chunked:
			r.body = &chunkedReader{br: br}
		case length >= 0:
			r.body = &lengthReader{r: br, left: length}
		default:
			r.body = br // until the agent closes the connection
		}
		return r, nil
	}
}

// readLine reads one CRLF- (or LF-) terminated line, charging its length
// to *budget and failing once that is spent.
func readLine(br *bufio.Reader, budget *int) (string, error) {
	var line []byte
	for {
		frag, err := br.ReadSlice('\n')
		if len(frag) > *budget {
			return "", fmt.Errorf("%w: header over %d bytes", errMalformed, maxHeader)
		}
		*budget -= len(frag)
		line = append(line, frag...)
		if err == nil {
			break
		}
		if err == bufio.ErrBufferFull {
			continue
		}
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return "", err
	}
	line = bytes.TrimSuffix(line[:len(line)-1], []byte("\r"))
	return string(line), nil
}

// clip keeps a bad line short and printable in an error.
func clip(s string) string {
	if len(s) > 60 {
		s = s[:60] + "…"
	}
	return sanitize(s)
}

// eofReader is an empty body.
type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

// lengthReader reads a body of a known length, and reports a connection
// that ends early as io.ErrUnexpectedEOF rather than a short answer.
type lengthReader struct {
	r    io.Reader
	left int64
}

func (l *lengthReader) Read(p []byte) (int, error) {
	if l.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(p)) > l.left {
		p = p[:l.left]
	}
	n, err := l.r.Read(p)
	l.left -= int64(n)
	if l.left == 0 {
		return n, io.EOF
	}
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	return n, err
}

// chunkedReader decodes a chunked body (RFC 9112 §7.1): hex size lines,
// each chunk followed by CRLF, a zero-size chunk and optional trailers last.
type chunkedReader struct {
	br   *bufio.Reader
	left int64 // bytes left in the current chunk
	done bool
	err  error
}

func (c *chunkedReader) Read(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	for c.left == 0 {
		if c.done {
			return 0, io.EOF
		}
		if err := c.next(); err != nil {
			c.err = err
			return 0, err
		}
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.br.Read(p)
	c.left -= int64(n)
	if err == io.EOF {
		err = io.ErrUnexpectedEOF
	}
	if err == nil && c.left == 0 {
		err = c.crlf()
	}
	if err != nil {
		c.err = err
	}
	return n, err
}

// next reads a chunk-size line; at the last chunk, the trailers too.
func (c *chunkedReader) next() error {
	budget := maxChunkLine
	line, err := readLine(c.br, &budget)
	if err != nil {
		return fmt.Errorf("chunked body: %w", err)
	}
	size, _, _ := strings.Cut(line, ";")
	size = strings.TrimSpace(size)
	n, err := strconv.ParseInt(size, 16, 64)
	if err != nil || n < 0 || len(size) > 16 {
		return fmt.Errorf("%w: chunk size %q", errMalformed, clip(line))
	}
	if n > 0 {
		c.left = n
		return nil
	}
	c.done = true
	budget = maxHeader
	for {
		t, err := readLine(c.br, &budget)
		if err != nil {
			return fmt.Errorf("chunked body trailer: %w", err)
		}
		if t == "" {
			return nil
		}
	}
}

// crlf reads the CRLF that ends a chunk's data.
func (c *chunkedReader) crlf() error {
	var b [2]byte
	if _, err := io.ReadFull(c.br, b[:]); err != nil {
		if err == io.EOF {
			err = io.ErrUnexpectedEOF
		}
		return err
	}
	if b != [2]byte{'\r', '\n'} {
		return fmt.Errorf("%w: chunk not ended by CRLF", errMalformed)
	}
	return nil
}
