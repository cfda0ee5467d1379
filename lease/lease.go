// Package lease holds the rules of a lease, with no I/O: what a lease is, who
// may claim, extend or end one, which GPUs (or which part of one) a claim
// gets, bookings, when a lease is due for its warning or its end, and which
// GPUs are idle or squatted. The rules of queued work (package queue) and
// of events (package event) are built on these; this package knows neither.
// The agent owns the clock, the store and the goroutines; this package only
// decides.
package lease

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dibs-gpu/dibs/internal/termsafe"
	"github.com/dibs-gpu/dibs/nodeprobe"
)

// Kind separates leases a person sits at from leases a job runs under; they
// get different default and maximum time limits.
type Kind string

// Lease kinds.
const (
	KindInteractive Kind = "interactive"
	KindBatch       Kind = "batch"
)

// ParseKind accepts the kinds a person may type.
func ParseKind(s string) (Kind, error) {
	switch Kind(strings.ToLower(strings.TrimSpace(s))) {
	case "", KindInteractive:
		return KindInteractive, nil
	case KindBatch:
		return KindBatch, nil
	}
	return "", Invalidf("unknown lease kind %q: use interactive or batch", s)
}

// Caller is who asks. The agent fills it from SO_PEERCRED or the SSH key, never
// from the request, so the rules here can trust it.
type Caller struct {
	UID   int    `json:"uid"`
	User  string `json:"user"`
	Admin bool   `json:"admin,omitempty"`
}

func (c Caller) String() string {
	if c.User != "" {
		return c.User
	}
	return "uid " + strconv.Itoa(c.UID)
}

// Lease is an exclusive, time-limited, advisory hold on some GPUs of one node.
type Lease struct {
	ID        string    `json:"id"`
	Node      string    `json:"node"`
	GPUs      []int     `json:"gpus"`
	User      string    `json:"user"`
	UID       int       `json:"uid"`
	Token     uint64    `json:"token"`
	Kind      Kind      `json:"kind"`
	Note      string    `json:"note"`
	StartedAt time.Time `json:"started_at"`
	ExpiresAt time.Time `json:"expires_at"`
	// Session is the tmux session started for this lease, empty for a bare claim.
	Session string `json:"session,omitempty"`
	// Warned records that the holder was told the end is near, so they are told
	// once, not every tick.
	Warned bool `json:"warned,omitempty"`
	// FinalWarned records the last warning, a minute before the end.
	FinalWarned bool `json:"final_warned,omitempty"`
	// OverdueNoticed records that the holder was told the lease is past its
	// end (end action warn).
	OverdueNoticed bool `json:"overdue_noticed,omitempty"`
	// Entry is the queue entry this lease was started for, so a retried
	// start is recognised and the submitter learns its request ran.
	Entry string `json:"entry,omitempty"`
	// Gang names the multi-node launch this lease is one rank of; Rank is
	// its NODE_RANK.
	Gang string `json:"gang,omitempty"`
	Rank int    `json:"rank,omitempty"`
	// Borrowed marks a lease beyond its user's quota: it may be preempted
	// when someone within their quota waits.
	Borrowed bool `json:"borrowed,omitempty"`
	// ReservedUntil, while set, makes this a gang reservation, not yet a
	// lease: it holds the GPUs and ends by itself at that time unless the
	// scheduler commits it.
	ReservedUntil time.Time `json:"reserved_until,omitzero"`
	// PreemptedAt is when cooperative preemption (or idle reclaim) told the
	// holder to stop; the lease ends a grace later. Zero until then.
	PreemptedAt time.Time `json:"preempted_at,omitzero"`
	// PreemptReason says why: "quota" or "idle".
	PreemptReason string `json:"preempt_reason,omitempty"`
	// SignalledAt is when the end action sent SIGTERM; SIGKILL follows a grace
	// later. Zero until then.
	SignalledAt time.Time `json:"signalled_at,omitzero"`
	// RequestID is the client's id for the claim that made this lease, so
	// a retried claim (the answer was lost) finds the lease instead of
	// taking more GPUs.
	RequestID string `json:"request_id,omitempty"`
	// QueuedAt is when the queue entry this lease was started for was
	// submitted; zero for a direct claim. The ledger keeps it, so `dibs
	// doctor` can tell how long queued work waited.
	QueuedAt time.Time `json:"queued_at,omitzero"`
	// MIG is the UUID ("MIG-…") of the one MIG instance the lease holds;
	// GPUs then names the GPU the instance lives on. Empty when the lease
	// holds whole GPUs.
	MIG string `json:"mig,omitempty"`
	// MemMiB is the memory budget of a lease on a shared GPU (the one GPU
	// in GPUs), which other shared leases may use beside it; 0 when the
	// lease holds whole GPUs.
	MemMiB uint64 `json:"mem_mib,omitempty"`
	// Share is the part of its GPU a MIG or shared lease counts for in
	// usage and fair-share, above 0 and at most 1; 0 for whole GPUs.
	Share float64 `json:"share,omitempty"`
	// Booked marks a booking: the GPUs are promised to the holder from
	// StartedAt to ExpiresAt and held by nobody before. At StartedAt the
	// node turns it into a lease (Booked cleared); until then nothing that
	// reads leases sees it (Table.List, State.Leases and NodeView.Leases
	// leave bookings out).
	Booked bool `json:"booked,omitempty"`
	// Group is the id of the multi-node booking this booking (or the
	// lease it became) is a part of: its first part's id, which names
	// the whole (`dibs unbook` withdraws every part). Empty for a booking
	// of one node; older agents ignore it.
	Group string `json:"group,omitempty"`
	// Job is the command a booking made with `dibs run --at` starts when
	// it turns into a lease.
	Job *Job `json:"job,omitempty"`
	// Containers are the short ids of the containers the holder adopted
	// (`dibs adopt --container`): a rootful runtime runs a container's
	// processes as root, and root's processes of these containers on this
	// lease's GPUs count as the holder's, not as squatters. At most
	// MaxContainers; older agents ignore the field.
	Containers []string `json:"containers,omitempty"`
	// CPUs are the cores chosen for the lease (--cpus-per-gpu), one Linux
	// CPU list per GPU in the order of GPUs, which its session is bound
	// to; empty when none were asked for (the session is then bound to
	// its GPUs' local cores). Agents before protocol 8 ignore the field.
	CPUs []string `json:"cpus,omitempty"`
	// AnyCPU: the holder asked for no binding (--cpus any).
	AnyCPU bool `json:"any_cpu,omitempty"`
	// Mono is kept by the store only: the lease's limits on the monotonic
	// clock of the boot that wrote them (see Table.Stamp). Nil elsewhere.
	Mono *MonoLimits `json:"mono,omitempty"`
}

// EachString calls f with the JSON name and the address of every string
// field of l, so code that checks or escapes text from outside (gossip, the
// front ends) need not list the fields, and a field added here is covered
// there. f may replace the string.
func (l *Lease) EachString(f func(field string, p *string)) {
	f("id", &l.ID)
	f("node", &l.Node)
	f("user", &l.User)
	f("kind", (*string)(&l.Kind))
	f("note", &l.Note)
	f("session", &l.Session)
	f("entry", &l.Entry)
	f("gang", &l.Gang)
	f("group", &l.Group)
	f("preempt_reason", &l.PreemptReason)
	f("request_id", &l.RequestID)
	f("mig", &l.MIG)
	for i := range l.Containers {
		f("container", &l.Containers[i])
	}
	for i := range l.CPUs {
		f("cpus", &l.CPUs[i])
	}
	l.Job.EachString(f)
}

// CheckText refuses a lease holding text no correct agent writes: every
// string of a lease is checked where it is made (notes by checkNote, names
// by the agent), so a control character, bidi control or invisible
// character in one means the lease came from a broken or hostile peer.
func (l *Lease) CheckText() error {
	// A booked run's command and directory are its holder's own argv and
	// path and may hold anything (as a queue entry's may).
	c := TextChecker{Skip: []string{"command", "dir"}}
	l.EachString(c.Check)
	return c.Err
}

// TextChecker keeps the first field that fails termsafe.Check (in Err),
// skipping the fields in Skip. A lease and a queue entry check their text
// with it.
type TextChecker struct {
	Skip []string
	Err  error
}

// Check is the visitor EachString calls: it checks one field's text.
func (c *TextChecker) Check(field string, p *string) {
	if c.Err != nil || slices.Contains(c.Skip, field) {
		return
	}
	if e := termsafe.Check(*p); e != nil {
		c.Err = fmt.Errorf("its %s holds %w", field, e)
	}
}

// Holds reports whether the lease covers GPU index.
func (l *Lease) Holds(gpu int) bool { return slices.Contains(l.GPUs, gpu) }

// Partial reports whether the lease holds part of a GPU (a MIG instance or
// a memory budget on a shared GPU) rather than whole GPUs.
func (l *Lease) Partial() bool { return l.MIG != "" || l.MemMiB > 0 }

// Weight is how many GPUs the lease counts for in usage and fair-share: its
// share of the GPU for a MIG or shared lease, else its number of GPUs.
func (l *Lease) Weight() float64 {
	if l.Partial() {
		return l.Share
	}
	return float64(len(l.GPUs))
}

// CUDAVisibleDevices is the value a job under this lease gets, in nvidia-smi's
// numbering (dibs also sets CUDA_DEVICE_ORDER=PCI_BUS_ID so CUDA agrees). A
// MIG instance is named by its UUID, the only way CUDA accepts one.
func (l *Lease) CUDAVisibleDevices() string {
	if l.MIG != "" {
		return l.MIG
	}
	parts := make([]string, len(l.GPUs))
	for i, g := range l.GPUs {
		parts[i] = strconv.Itoa(g)
	}
	return strings.Join(parts, ",")
}

// Env is the environment every process started under the lease gets. A
// lease on a shared GPU also says its budget (DIBS_MEM_BUDGET_MIB), so a job
// can size its batches or cap its allocator to it.
func (l *Lease) Env() map[string]string {
	env := map[string]string{
		"CUDA_VISIBLE_DEVICES": l.CUDAVisibleDevices(),
		"CUDA_DEVICE_ORDER":    "PCI_BUS_ID",
		"DIBS_LEASE_ID":        l.ID,
		"DIBS_LEASE_TOKEN":     strconv.FormatUint(l.Token, 10),
		"DIBS_NODE":            l.Node,
	}
	if l.MemMiB > 0 {
		env["DIBS_MEM_BUDGET_MIB"] = strconv.FormatUint(l.MemMiB, 10)
	}
	for k, v := range ArrayEnv(l.Entry) {
		env[k] = v
	}
	return env
}

// DeviceEnv names the lease's GPUs the way container runtimes take them:
// by UUID, which means the same GPU in every numbering (a container's
// CUDA_VISIBLE_DEVICES counts from 0 again). DIBS_GPU_UUIDS is the list,
// for `docker run --gpus "device=$DIBS_GPU_UUIDS"`, podman's CDI
// (`--device nvidia.com/gpu=UUID`) and apptainer; NVIDIA_VISIBLE_DEVICES
// holds the same, for the NVIDIA container runtime and `apptainer
// --nvccli`. A MIG lease names its instance. Empty when a GPU's UUID is
// unknown (snap lacks it): a partial list would hand a container too few.
func (l *Lease) DeviceEnv(snap nodeprobe.Snapshot) map[string]string {
	uuids := []string{l.MIG}
	if l.MIG == "" {
		uuids = uuids[:0]
		for _, i := range l.GPUs {
			u := ""
			for _, g := range snap.GPUs {
				if g.Index == i {
					u = g.UUID
				}
			}
			if u == "" || strings.ContainsAny(u, ", \t\n\"'") {
				return nil
			}
			uuids = append(uuids, u)
		}
	}
	if len(uuids) == 0 {
		return nil
	}
	list := strings.Join(uuids, ",")
	return map[string]string{"DIBS_GPU_UUIDS": list, "NVIDIA_VISIBLE_DEVICES": list}
}

// LogName names the file the output of the run under the lease is kept
// in: its session and the instant it started, so two runs that share a
// session name never write one file (lease ids start again at 1 when a
// node's state is new, and --name is the holder's choice). It is what
// tmux keeps as a session name (launch.CheckName), at most 128 bytes.
func (l *Lease) LogName() string {
	suffix := "-" + strconv.FormatInt(l.StartedAt.UnixNano(), 36)
	s := l.Session
	if len(s)+len(suffix) > 128 {
		s = s[:128-len(suffix)]
	}
	return s + suffix
}

// LeaseID names a lease after its node and fencing token: unique per node,
// short enough to type, and it says where the lease lives.
func LeaseID(node string, token uint64) string {
	return node + "-" + strconv.FormatUint(token, 10)
}

// NodeOfID returns the node part of a lease id, so a request can be routed to
// the agent that owns the lease.
func NodeOfID(id string) (string, bool) {
	i := strings.LastIndexByte(id, '-')
	if i <= 0 || i == len(id)-1 {
		return "", false
	}
	if _, err := strconv.ParseUint(id[i+1:], 10, 64); err != nil {
		return "", false
	}
	return id[:i], true
}

// Code classifies a refusal so the API can map it to a status and the CLI to
// an exit code without parsing messages.
type Code string

// Refusal codes.
const (
	CodeInvalid     Code = "invalid"     // the request itself is wrong
	CodeConflict    Code = "conflict"    // the GPUs are not free
	CodeNotFound    Code = "not_found"   // no such lease
	CodeForbidden   Code = "forbidden"   // not yours
	CodeUnavailable Code = "unavailable" // the agent cannot serve it now (disk full, node down)
	// CodeNoAnswer: the agent asked another, which did not answer in time,
	// so the request may or may not have been carried out there. A caller
	// must not take it for a refusal: retry with the same request id, or
	// look before acting again.
	CodeNoAnswer Code = "no_answer"
)

// Error is a refusal a person should read: Msg says what was wrong and what to
// do about it. Only Code and Msg travel: the cause is this process's own, kept
// so that errors.Is and errors.As still find what went wrong underneath.
type Error struct {
	Code Code
	Msg  string

	cause error // never serialised: unexported, and peers rebuild Code and Msg alone
}

func (e *Error) Error() string { return e.Msg }

// Unwrap returns the error the refusal was built from (by Wrap or Wrapf), or
// nil, so a refusal does not hide its cause from errors.Is and errors.As.
func (e *Error) Unwrap() error { return e.cause }

// Invalidf builds a CodeInvalid refusal.
func Invalidf(format string, args ...any) error {
	return &Error{Code: CodeInvalid, Msg: fmt.Sprintf(format, args...)}
}

// Wrap turns err into a refusal of code whose message is err's own, keeping
// err as its cause: use it where an error is already fit for a person to read.
func Wrap(code Code, err error) error {
	return &Error{Code: code, Msg: err.Error(), cause: err}
}

// Wrapf builds a refusal of code with the message format says and keeps cause
// as what it unwraps to, so the refusal's words are the caller's and the
// chain underneath survives (errors.Is(refusal, cause) holds).
func Wrapf(code Code, cause error, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...), cause: cause}
}

func errorf(code Code, format string, args ...any) error {
	return &Error{Code: code, Msg: fmt.Sprintf(format, args...)}
}

// CodeOf returns the refusal code of err, or "" when err is not a refusal.
func CodeOf(err error) Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return ""
}

// FormatDuration prints a duration the way people write them: 3h20m, 45m, 30s.
func FormatDuration(d time.Duration) string {
	neg := d < 0
	if neg {
		d = -d
	}
	d = d.Round(time.Second)
	var s string
	switch {
	case d >= 24*time.Hour:
		days := d / (24 * time.Hour)
		h := (d % (24 * time.Hour)) / time.Hour
		s = fmt.Sprintf("%dd%dh", days, h)
		if h == 0 {
			s = fmt.Sprintf("%dd", days)
		}
	case d >= time.Hour:
		h, m := d/time.Hour, (d%time.Hour)/time.Minute
		s = fmt.Sprintf("%dh%02dm", h, m)
		if m == 0 {
			s = fmt.Sprintf("%dh", h)
		}
	case d >= time.Minute:
		s = fmt.Sprintf("%dm", d/time.Minute)
	default:
		s = fmt.Sprintf("%ds", d/time.Second)
	}
	if neg {
		return "-" + s
	}
	return s
}

// ToMinute rounds d to the minute for a sentence that needs no seconds,
// but not below one: under a minute it keeps its seconds, so 20 s of idle
// reads "20s", not the "0s" a plain Round(time.Minute) made of it.
func ToMinute(d time.Duration) time.Duration {
	if d > -time.Minute && d < time.Minute {
		return d.Round(time.Second)
	}
	return d.Round(time.Minute)
}

// MaxDuration is the longest time limit ParseDuration accepts, ten years: far
// over any policy maximum, and short enough that every duration it accepts
// prints (FormatDuration) in a form it accepts again.
const MaxDuration = 3650 * 24 * time.Hour

// ParseDuration reads a time limit as a person types it: Go durations (90m,
// 1h30m) plus days (2d, 1d12h). Zero and negative limits are refused.
func ParseDuration(s string) (time.Duration, error) {
	in := strings.TrimSpace(s)
	if in == "" {
		return 0, Invalidf("empty duration: write it like 30m, 4h or 2d")
	}
	bad := Invalidf("cannot read duration %s: write it like 30m, 4h or 2d", QuoteInput(in))
	rest := in
	var days time.Duration
	if i := strings.IndexByte(rest, 'd'); i > 0 {
		n, err := strconv.Atoi(rest[:i])
		if err != nil || n < 0 || n > int(MaxDuration/(24*time.Hour)) {
			return 0, bad
		}
		days = time.Duration(n) * 24 * time.Hour
		rest = rest[i+1:]
		// "1d-5h" is not a way to write 19h.
		if strings.HasPrefix(rest, "-") || strings.HasPrefix(rest, "+") {
			return 0, bad
		}
	}
	var d time.Duration
	if rest != "" {
		var err error
		if d, err = time.ParseDuration(rest); err != nil {
			return 0, bad
		}
	}
	if d > 0 && d > MaxDuration-days {
		return 0, Invalidf("duration %s is longer than %s: ask for less", QuoteInput(in), FormatDuration(MaxDuration))
	}
	d += days
	if d <= 0 {
		return 0, Invalidf("duration must be positive, got %s: write it like 30m, 4h or 2d", FormatDuration(d))
	}
	return d, nil
}

// QuoteInput quotes what a person (or a program) sent for an error message,
// cut short: the input may come from the network and be of any length. The
// queue and the events quote their input the same way.
func QuoteInput(s string) string {
	const max = 32
	if len(s) <= max {
		return strconv.Quote(s)
	}
	cut := max
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strconv.Quote(s[:cut]) + "..."
}
