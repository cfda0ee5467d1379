package gossip

import (
	"bytes"
	"compress/flate"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/termsafe"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/queue"
)

// The wire format, in the manner of serf's messages.go: every message is
//
//	[type: 1 byte] [wire version: 1 byte] [flags: 1 byte] [body]
//
// and the body is JSON of one of the unexported structs below, deflated
// when flagDeflate is set. JSON keeps the lease and snapshot types of the
// packages below as their owners wrote them (a field they add travels
// without a change here); deflate wins back what JSON spends, which is what
// lets a node's 8-GPU telemetry fit one UDP packet.
//
// Every decoder refuses a body over its size limit before decoding it,
// refuses a deflated body that inflates past the same limit, and validates
// what it decoded (names, counts, GPU indices, lengths) before anything else
// sees it. Text is held to what a correct agent sends: text an agent checks
// where it is made (lease notes, users, kinds, session names, usage users,
// the caller of a request) must be terminal-safe (termsafe.Check), or the
// message is refused; text an agent forwards as it found it (process names
// and users from /proc, GPU and driver strings, host facts, a refusal's
// message) is escaped in place (termsafe.String), so a hostile process name
// on one node reaches no other node's terminal raw and the node stays
// visible. Unknown JSON fields are ignored so a newer agent can add some;
// an incompatible change bumps wireVersion, and an agent refuses versions it
// cannot read.

// messageType is the first byte of every dibs gossip message.
type messageType uint8

const (
	// msgState carries one section of one node's state.
	msgState messageType = 1
	// msgLeave says a node is leaving the cluster on purpose.
	msgLeave messageType = 2
	// msgRequest asks the owner of a node to do something.
	msgRequest messageType = 3
	// msgResponse answers a msgRequest.
	msgResponse messageType = 4
	// msgPushPull is the full state exchanged by memberlist's push/pull.
	msgPushPull messageType = 5
	// msgSuspect says an agent's probe of a node failed, so every agent
	// shows it suspect, not only the one that probed.
	msgSuspect messageType = 6
)

func (t messageType) String() string {
	switch t {
	case msgState:
		return "state"
	case msgLeave:
		return "leave"
	case msgRequest:
		return "request"
	case msgResponse:
		return "response"
	case msgPushPull:
		return "push/pull"
	case msgSuspect:
		return "suspect"
	}
	return fmt.Sprintf("type %d", uint8(t))
}

const (
	// wireVersion is the version this agent writes.
	wireVersion = 2
	// minWireVersion is the oldest version this agent reads. Version 2
	// carries the queue as typed sections and no caller in requests.
	minWireVersion = 2

	headerLen = 3

	// flagDeflate marks a deflated body.
	flagDeflate = 1 << 0
	// knownFlags are the flag bits this version understands; a message
	// with any other bit set is refused rather than misread.
	knownFlags = flagDeflate

	// deflateAbove is the body size from which encode tries deflate for
	// state, which has to fit UDP packets; requests and responses go over
	// TCP and are deflated only when large, since a deflate writer costs a
	// few hundred microseconds to set up.
	deflateAbove         = 192
	deflateRequestsAbove = 16 << 10
)

// Size limits, checked on the encoded message and again on the inflated body.
const (
	maxStateBytes    = 1 << 20  // one section of one node
	maxRequestBytes  = 1 << 20  // a request or response
	maxLeaveBytes    = 4 << 10  // a leave notice
	maxPushPullBytes = 16 << 20 // every node's state (memberlist caps it at 20 MB)
)

// Validation bounds. They are sanity limits for what crosses the wire, not
// policy: the rules live in lease.
const (
	maxNodeName    = 253 // a DNS name
	maxBootID      = 64
	maxLeases      = 4096
	maxGPUIndex    = 1024
	maxGPUs        = 1024
	maxProcesses   = 4096
	maxMIGDevices  = 128
	maxLinks       = 1024
	maxShortString = 256  // ids, users, kinds, sessions, ops
	maxWireNote    = 1024 // words.MaxNoteLen is policy; this is the wire's bound
	maxUsers       = 10000
	maxEntries     = 4096
	maxStates      = 1 << 16
)

// Section kinds of a node's state. Leases change rarely and must arrive at
// once; telemetry changes all the time and may be a few seconds stale. Each
// section travels, is versioned and is replaced on its own.
const (
	sectionLeases    = "leases"
	sectionTelemetry = "telemetry"
)

// stateMsg is one section of one node's state. (BootedAt, BootID, Seq)
// orders sections of the same kind: Seq grows each time the section's
// content changes within a boot, to at least the boot's age in milliseconds
// (agents before 0.2 count 1, 2, 3…; both only ever grow), and may not run
// further ahead of that age than maxSeqLead (refute.go).
type stateMsg struct {
	Node     string `json:"n"`
	BootID   string `json:"b"`
	BootedAt int64  `json:"t"` // unix nanoseconds
	Seq      uint64 `json:"s"`
	// Version is the agent's NodeState.Version when the section was taken.
	Version uint64 `json:"v"`
	Section string `json:"k"`
	// Partial marks a gossip copy whose lease notes were trimmed to fit one
	// UDP packet; a full copy of the same Seq replaces it.
	Partial   bool              `json:"p,omitempty"`
	Leases    *leaseSection     `json:"l,omitempty"`
	Telemetry *telemetrySection `json:"m,omitempty"`
}

// leaseSection is the urgent part of a node's state.
type leaseSection struct {
	Leases     []lease.Lease      `json:"leases"`
	Queue      []queue.QueueEntry `json:"queue,omitempty"`
	Ended      []lease.EndedRun   `json:"ended,omitempty"`
	QuietSince map[int]time.Time  `json:"quiet_since,omitempty"`
}

// telemetrySection is the best-effort part of a node's state.
type telemetrySection struct {
	Snapshot nodeprobe.Snapshot `json:"snapshot"`
	Usage    map[string]float64 `json:"usage,omitempty"`
}

// leaveMsg says the agent of Node's boot BootID left on purpose, so the
// others show it as left rather than dead.
type leaveMsg struct {
	Node     string `json:"n"`
	BootID   string `json:"b"`
	BootedAt int64  `json:"t"`
	// Seq is the sequence of the node's last lease section: a lease section
	// of the boot with a higher one says the node did not leave (a forged
	// leave, refuted; see refute.go). Zero from agents before it was added.
	Seq uint64 `json:"s,omitempty"`
}

// requestMsg asks the agent of another node to act. Reply is the
// requester's memberlist address, where the response goes.
type requestMsg struct {
	ID        uint64          `json:"id"`
	From      string          `json:"from"`
	Reply     string          `json:"reply"`
	Op        string          `json:"op"`
	Body      json.RawMessage `json:"body,omitempty"`
	TimeoutMS int64           `json:"timeout_ms"`
}

// responseMsg answers the request with the same ID.
type responseMsg struct {
	ID      uint64          `json:"id"`
	From    string          `json:"from"`
	Body    json.RawMessage `json:"body,omitempty"`
	ErrCode refusal.Code    `json:"code,omitempty"`
	ErrMsg  string          `json:"err,omitempty"`
}

// pushPullMsg is what LocalState hands memberlist for a push/pull: the
// sections this agent holds for every node (its own freshest) and the
// leaves it knows of. Each state is a stateMsg; they stay raw so they can be
// relayed byte for byte.
type pushPullMsg struct {
	From   string            `json:"f"`
	States []json.RawMessage `json:"s"`
	Left   []leaveMsg        `json:"l,omitempty"`
}

// errWire marks every decoding failure, so counters can tell them apart.
var errWire = errors.New("bad gossip message")

func wireErrorf(format string, args ...any) error {
	return fmt.Errorf("%w: %s", errWire, fmt.Sprintf(format, args...))
}

// maxBytesFor is the size limit of a message type.
func maxBytesFor(t messageType) int {
	switch t {
	case msgState:
		return maxStateBytes
	case msgLeave:
		return maxLeaveBytes
	case msgRequest, msgResponse:
		return maxRequestBytes
	case msgPushPull:
		return maxPushPullBytes
	case msgSuspect:
		return maxLeaveBytes
	}
	return 0
}

// codec encodes and decodes messages, reusing deflate state between calls
// (a deflate writer costs ~800 KB to set up, a reader ~45 KB, and a cluster
// decodes one message per member for every change). A nil *codec works and
// reuses nothing; the package-level helpers use one.
type codec struct {
	writers sync.Pool // *flate.Writer
	readers sync.Pool // flate reader (io.ReadCloser + flate.Resetter)
}

// encodeMessage frames v as a message of type t, deflating the body when
// that makes it smaller.
func encodeMessage(t messageType, v any) ([]byte, error) { return (*codec)(nil).encode(t, v) }

func (cd *codec) encode(t messageType, v any) ([]byte, error) {
	body, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("encode %s message: %w", t, err)
	}
	return cd.frame(t, body)
}

// frame puts the header on an encoded body.
func frame(t messageType, body []byte) ([]byte, error) { return (*codec)(nil).frame(t, body) }

func (cd *codec) frame(t messageType, body []byte) ([]byte, error) {
	limit := maxBytesFor(t)
	if len(body) > limit {
		return nil, fmt.Errorf("encode %s message: body is %d bytes, over the %d-byte limit", t, len(body), limit)
	}
	threshold := deflateAbove
	if t == msgRequest || t == msgResponse {
		threshold = deflateRequestsAbove
	}
	if len(body) >= threshold {
		var buf bytes.Buffer
		buf.Grow(headerLen + len(body)/2)
		buf.Write([]byte{byte(t), wireVersion, flagDeflate})
		w, err := cd.writer(&buf)
		if err != nil {
			return nil, fmt.Errorf("encode %s message: %w", t, err)
		}
		_, err = w.Write(body)
		if err == nil {
			err = w.Close()
		}
		cd.putWriter(w)
		if err != nil {
			return nil, fmt.Errorf("encode %s message: %w", t, err)
		}
		if buf.Len() < headerLen+len(body) {
			return buf.Bytes(), nil
		}
	}
	out := make([]byte, 0, headerLen+len(body))
	out = append(out, byte(t), wireVersion, 0)
	return append(out, body...), nil
}

func (cd *codec) writer(w io.Writer) (*flate.Writer, error) {
	if cd != nil {
		if fw, ok := cd.writers.Get().(*flate.Writer); ok {
			fw.Reset(w)
			return fw, nil
		}
	}
	return flate.NewWriter(w, flate.DefaultCompression)
}

func (cd *codec) putWriter(w *flate.Writer) {
	if cd != nil {
		cd.writers.Put(w)
	}
}

// inflate reads a deflated body, refusing more than limit bytes.
func (cd *codec) inflate(body []byte, limit int) ([]byte, error) {
	src := bytes.NewReader(body)
	var r io.ReadCloser
	if cd != nil {
		if pr, ok := cd.readers.Get().(io.ReadCloser); ok {
			if err := pr.(flate.Resetter).Reset(src, nil); err == nil {
				r = pr
			}
		}
	}
	if r == nil {
		r = flate.NewReader(src)
	}
	var out bytes.Buffer
	out.Grow(min(limit+1, 8*len(body)+512))
	_, err := out.ReadFrom(io.LimitReader(r, int64(limit)+1))
	r.Close()
	if cd != nil {
		cd.readers.Put(r)
	}
	return out.Bytes(), err
}

// unframe checks a message's header and returns its type and its body,
// inflated, within the type's size limit.
func unframe(b []byte) (messageType, []byte, error) { return (*codec)(nil).unframe(b) }

func (cd *codec) unframe(b []byte) (messageType, []byte, error) {
	if len(b) < headerLen {
		return 0, nil, wireErrorf("%d bytes is shorter than a header", len(b))
	}
	t := messageType(b[0])
	limit := maxBytesFor(t)
	if limit == 0 {
		return t, nil, wireErrorf("unknown message type %d", b[0])
	}
	if v := b[1]; v < minWireVersion || v > wireVersion {
		return t, nil, wireErrorf("%s message has wire version %d; this agent reads %d to %d: nodes may be at most one dibs release apart", t, v, minWireVersion, wireVersion)
	}
	flags := b[2]
	if flags&^knownFlags != 0 {
		return t, nil, wireErrorf("%s message has unknown flags %#x", t, flags)
	}
	body := b[headerLen:]
	if len(body) > limit {
		return t, nil, wireErrorf("%s message is %d bytes, over the %d-byte limit", t, len(body), limit)
	}
	if flags&flagDeflate != 0 {
		inflated, err := cd.inflate(body, limit)
		if err != nil {
			return t, nil, wireErrorf("inflate %s message: %v", t, err)
		}
		if len(inflated) > limit {
			return t, nil, wireErrorf("%s message inflates past the %d-byte limit", t, limit)
		}
		body = inflated
	}
	return t, body, nil
}

// decodeBody unframes b, checks it is of type want and decodes its JSON
// body into v.
func (cd *codec) decodeBody(b []byte, want messageType, v any) error {
	t, body, err := cd.unframe(b)
	if err != nil {
		return err
	}
	if t != want {
		return wireErrorf("got a %s message, want %s", t, want)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return wireErrorf("decode %s message: %v", t, err)
	}
	return nil
}

// decodeState decodes and validates a msgState.
func decodeState(b []byte) (*stateMsg, error) { return (*codec)(nil).decodeState(b) }

func (cd *codec) decodeState(b []byte) (*stateMsg, error) {
	var m stateMsg
	if err := cd.decodeBody(b, msgState, &m); err != nil {
		return nil, err
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	m.escapeText()
	return &m, nil
}

// decodeStateJSON decodes and validates the JSON body of a stateMsg, as
// push/pull carries them.
func decodeStateJSON(body []byte) (*stateMsg, error) {
	if len(body) > maxStateBytes {
		return nil, wireErrorf("state is %d bytes, over the %d-byte limit", len(body), maxStateBytes)
	}
	var m stateMsg
	if err := json.Unmarshal(body, &m); err != nil {
		return nil, wireErrorf("decode state: %v", err)
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	m.escapeText()
	return &m, nil
}

// decodeLeave decodes and validates a msgLeave.
func decodeLeave(b []byte) (*leaveMsg, error) { return (*codec)(nil).decodeLeave(b) }

func (cd *codec) decodeLeave(b []byte) (*leaveMsg, error) {
	var m leaveMsg
	if err := cd.decodeBody(b, msgLeave, &m); err != nil {
		return nil, err
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// decodeRequest decodes and validates a msgRequest.
func decodeRequest(b []byte) (*requestMsg, error) { return (*codec)(nil).decodeRequest(b) }

func (cd *codec) decodeRequest(b []byte) (*requestMsg, error) {
	var m requestMsg
	if err := cd.decodeBody(b, msgRequest, &m); err != nil {
		return nil, err
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// decodeResponse decodes and validates a msgResponse.
func decodeResponse(b []byte) (*responseMsg, error) { return (*codec)(nil).decodeResponse(b) }

func (cd *codec) decodeResponse(b []byte) (*responseMsg, error) {
	var m responseMsg
	if err := cd.decodeBody(b, msgResponse, &m); err != nil {
		return nil, err
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	m.ErrMsg = termsafe.String(m.ErrMsg)
	return &m, nil
}

// decodePushPull decodes and validates a msgPushPull, states included.
func decodePushPull(b []byte) (*pushPullMsg, []*stateMsg, error) {
	return (*codec)(nil).decodePushPull(b)
}

func (cd *codec) decodePushPull(b []byte) (*pushPullMsg, []*stateMsg, error) {
	var m pushPullMsg
	if err := cd.decodeBody(b, msgPushPull, &m); err != nil {
		return nil, nil, err
	}
	if err := m.validate(); err != nil {
		return nil, nil, err
	}
	states := make([]*stateMsg, 0, len(m.States))
	for i, raw := range m.States {
		s, err := decodeStateJSON(raw)
		if err != nil {
			return nil, nil, fmt.Errorf("push/pull state %d: %w", i, err)
		}
		states = append(states, s)
	}
	return &m, states, nil
}

// suspectMsg says By's probe of Node (of boot BootID) failed.
type suspectMsg struct {
	Node   string `json:"n"`
	BootID string `json:"b"`
	By     string `json:"by"`
	// At is when the probe failed (unix nanoseconds; zero from v0.1.0),
	// so that two suspicions of one boot by one agent are two messages:
	// agents drop copies of a message already handled (refute.go).
	At int64 `json:"at,omitempty"`
}

func decodeSuspect(b []byte) (*suspectMsg, error) { return (*codec)(nil).decodeSuspect(b) }

func (cd *codec) decodeSuspect(b []byte) (*suspectMsg, error) {
	var m suspectMsg
	if err := cd.decodeBody(b, msgSuspect, &m); err != nil {
		return nil, err
	}
	if err := m.validate(); err != nil {
		return nil, err
	}
	return &m, nil
}

// decodedMessage is any decoded message, for tests and fuzzing.
type decodedMessage struct {
	Type     messageType
	State    *stateMsg
	Leave    *leaveMsg
	Suspect  *suspectMsg
	Request  *requestMsg
	Response *responseMsg
	PushPull *pushPullMsg
	States   []*stateMsg // of a push/pull
}

// decodeMessage decodes a message of any type.
func decodeMessage(b []byte) (decodedMessage, error) {
	if len(b) == 0 {
		return decodedMessage{}, wireErrorf("empty message")
	}
	d := decodedMessage{Type: messageType(b[0])}
	var err error
	switch d.Type {
	case msgState:
		d.State, err = decodeState(b)
	case msgLeave:
		d.Leave, err = decodeLeave(b)
	case msgRequest:
		d.Request, err = decodeRequest(b)
	case msgResponse:
		d.Response, err = decodeResponse(b)
	case msgPushPull:
		d.PushPull, d.States, err = decodePushPull(b)
	case msgSuspect:
		d.Suspect, err = decodeSuspect(b)
	default:
		err = wireErrorf("unknown message type %d", b[0])
	}
	return d, err
}
