package events

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/event"
)

// The agent (root) posts to an address a person chose. What keeps that
// from being more than a notification:
//   - only http and https, no user:password in the address;
//   - the body is always the notice, in one of two fixed shapes;
//   - no redirect is followed, and the answer is read at most 4 KiB and
//     never shown;
//   - a failed try is one class to the person, "not delivered", whatever
//     happened (a closed port, an open one that is not HTTP, an HTTP server
//     that said 404), and `dibs notify --test` says so when the try's time
//     is up: neither the answer nor its timing tells ports apart, so a
//     webhook is no port scanner (the agent's log keeps the detail for
//     admins; a background delivery's failure is known only minutes later,
//     after its retries);
//   - link-local, multicast and unspecified addresses and the clouds'
//     metadata services (169.254.169.254, fd00:ec2::254, 100.100.100.200)
//     are refused in every form they can be written in (IPv4-mapped,
//     IPv4-compatible, NAT64, 6to4, Teredo) when dialled, after DNS, so a
//     name cannot rebind to them;
//   - an admin may allow only listed destinations ([events] webhook_allow:
//     host names and address prefixes);
//   - every try is bounded in time (5 s), and a person's notices are
//     delivered one at a time.
//
// Loopback and private addresses are allowed unless an allowlist says
// otherwise: an ntfy server on the team's network is the common case.
// docs/user-guide.md says so.
const (
	webhookTimeout   = 5 * time.Second
	maxWebhookAnswer = 4 << 10
	maxFailures      = 5
	userQueue        = 64
)

// DefaultBackoff is the wait before each retry of a failed delivery.
var defaultBackoff = []time.Duration{2 * time.Second, 10 * time.Second, 30 * time.Second, 2 * time.Minute}

// WebhookConfig is what the webhooks are told.
type WebhookConfig struct {
	// Backoff is the wait before each retry (default 2s, 10s, 30s, 2m:
	// five tries in all).
	Backoff []time.Duration
	// UserAgent names the agent to the receiving server.
	UserAgent string
	// Timeout bounds each try (default 5 s); a test post that fails is
	// reported when it is up, however early it failed.
	Timeout time.Duration
	// Allow, when not empty, lists the only destinations an admin lets
	// webhooks reach: host names ("ntfy.example.com", or ".example.com"
	// for a domain and its subdomains) and address prefixes ("10.0.0.0/8").
	// Refused addresses stay refused. ParseAllow reads it.
	Allow Allowlist
	Log   *slog.Logger
}

// Allowlist is an admin's list of webhook destinations.
type Allowlist struct {
	Names    []string
	Prefixes []netip.Prefix
}

// ParseAllow reads an allowlist's entries: address prefixes, addresses,
// or host names (a leading dot: the domain and its subdomains).
func ParseAllow(entries []string) (Allowlist, error) {
	var a Allowlist
	for _, e := range entries {
		e = strings.ToLower(strings.TrimSpace(e))
		if p, err := netip.ParsePrefix(e); err == nil {
			a.Prefixes = append(a.Prefixes, p.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(e); err == nil {
			a.Prefixes = append(a.Prefixes, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		name := strings.TrimPrefix(e, ".")
		if name == "" || len(name) > 253 || strings.ContainsAny(name, "/:@ []") {
			return Allowlist{}, fmt.Errorf("webhook_allow: %q is not a host name, an address or an address prefix (like 10.0.0.0/8)", e)
		}
		a.Names = append(a.Names, e)
	}
	return a, nil
}

// empty reports whether the allowlist allows everything not refused.
func (a Allowlist) empty() bool { return len(a.Names) == 0 && len(a.Prefixes) == 0 }

// nameAllowed reports whether host is listed by name.
func (a Allowlist) nameAllowed(host string) bool {
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, n := range a.Names {
		if host == n || strings.HasPrefix(n, ".") && (host == n[1:] || strings.HasSuffix(host, n)) {
			return true
		}
	}
	return false
}

// addrAllowed reports whether ip is in a listed prefix.
func (a Allowlist) addrAllowed(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range a.Prefixes {
		if p.Contains(ip) {
			return true
		}
	}
	return false
}

// Webhooks posts people's notices to the addresses they set, from the node
// that keeps their setting. Safe for concurrent use.
type Webhooks struct {
	cfg    WebhookConfig
	store  event.EventStore
	clock  clock.Clock
	client *http.Client

	mu       sync.Mutex
	settings map[string]event.NotifySetting
	status   map[string]*delivery
	queues   map[string]chan event.Notice

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// delivery is what a person can learn of their webhook's deliveries.
type delivery struct {
	lastOK   time.Time
	failures []Failure
}

// Failure is a notice that could not be delivered after every try.
type Failure struct {
	At       time.Time `json:"at"`
	Text     string    `json:"text"`
	Err      string    `json:"error"`
	Attempts int       `json:"attempts"`
}

// Status is a person's webhook as this node keeps it.
type Status struct {
	Setting  *event.NotifySetting `json:"setting,omitempty"`
	LastOK   time.Time            `json:"last_ok,omitzero"`
	Failures []Failure            `json:"failures,omitempty"`
	Pending  int                  `json:"pending,omitempty"`
}

// NewWebhooks builds the webhooks over store; Open loads the settings.
func NewWebhooks(cfg WebhookConfig, store event.EventStore, clk clock.Clock) *Webhooks {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Backoff == nil {
		cfg.Backoff = defaultBackoff
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "dibs"
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = webhookTimeout
	}
	if clk == nil {
		clk = clock.Real()
	}
	w := &Webhooks{cfg: cfg, store: store, clock: clk, settings: map[string]event.NotifySetting{},
		status: map[string]*delivery{}, queues: map[string]chan event.Notice{}}
	w.client = &http.Client{
		Timeout: cfg.Timeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: cfg.Timeout, ControlContext: w.checkDial}).DialContext,
			TLSHandshakeTimeout:   cfg.Timeout,
			ResponseHeaderTimeout: cfg.Timeout,
			MaxIdleConns:          4,
			IdleConnTimeout:       30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w
}

// Open loads the settings kept here.
func (w *Webhooks) Open() error {
	list, err := w.store.Settings()
	if err != nil {
		return fmt.Errorf("read the webhook settings: %w", err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, s := range list {
		w.settings[s.User] = s
	}
	return nil
}

// Close stops the deliveries in flight (their retries are given up).
func (w *Webhooks) Close() {
	w.cancel()
	w.wg.Wait()
}

// CheckURL refuses an address the agent will not post to, saying why.
func CheckURL(raw string) error {
	if len(raw) > event.MaxWebhookURL {
		return refusal.Invalidf("the webhook address is over %d characters", event.MaxWebhookURL)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return refusal.Invalidf("%q is not an http:// or https:// address: give the webhook URL your chat or ntfy shows you", clip(raw))
	}
	if u.User != nil {
		return refusal.Invalidf("the webhook address carries a user or password; use a token in the path or query instead")
	}
	if strings.ContainsAny(raw, " \t\r\n") {
		return refusal.Invalidf("the webhook address has spaces in it")
	}
	if ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil && refused(ip) {
		return refusal.Invalidf("dibs does not post to %s: link-local, multicast, unspecified and cloud metadata addresses are refused, in every form", ip)
	}
	return nil
}

// checkAllowed refuses, at the time a person sets it, an address the
// admin's allowlist cannot let through.
func (w *Webhooks) checkAllowed(raw string) error {
	if w.cfg.Allow.empty() {
		return nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return refusal.Invalidf("not a usable webhook address")
	}
	host := u.Hostname()
	if w.cfg.Allow.nameAllowed(host) {
		return nil
	}
	ip, err := netip.ParseAddr(host)
	if err == nil && w.cfg.Allow.addrAllowed(ip) || err != nil && len(w.cfg.Allow.Prefixes) > 0 {
		return nil // a name is checked again where it resolves to
	}
	return refusal.Invalidf("this node's admin allows webhooks only to listed destinations, and %s is not one: ask them, or use one of the team's", clip(host))
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

// metadataAddrs are the clouds' instance metadata services outside the
// link-local range (169.254.169.254 and ECS's 169.254.170.2 are inside
// it): AWS over IPv6, and Alibaba Cloud.
var metadataAddrs = []netip.Addr{
	netip.MustParseAddr("fd00:ec2::254"),
	netip.MustParseAddr("100.100.100.200"),
}

// refused reports whether ip, or an IPv4 address written inside it, is one
// webhooks never reach.
func refused(ip netip.Addr) bool {
	ip = ip.WithZone("").Unmap()
	if v4, ok := embeddedV4(ip); ok && refused(v4) {
		return true
	}
	if ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified() {
		return true
	}
	for _, m := range metadataAddrs {
		if ip == m {
			return true
		}
	}
	return false
}

// Prefixes of IPv6 addresses that carry an IPv4 address a router or the
// kernel may reach for them.
var (
	nat64       = netip.MustParsePrefix("64:ff9b::/96")   // RFC 6052
	nat64Local  = netip.MustParsePrefix("64:ff9b:1::/48") // RFC 8215
	v4Compat    = netip.MustParsePrefix("::/96")          // deprecated IPv4-compatible
	sixToFour   = netip.MustParsePrefix("2002::/16")      // RFC 3056
	teredo      = netip.MustParsePrefix("2001::/32")      // RFC 4380
	v4Loopbacks = netip.MustParsePrefix("::/127")         // :: and ::1 are not IPv4
)

// embeddedV4 is the IPv4 address an IPv6 one carries, in the forms that
// reach it: NAT64, IPv4-compatible, 6to4 and Teredo (its client, stored
// inverted).
func embeddedV4(ip netip.Addr) (netip.Addr, bool) {
	if !ip.Is6() {
		return netip.Addr{}, false
	}
	b := ip.As16()
	switch {
	case nat64.Contains(ip), nat64Local.Contains(ip), v4Compat.Contains(ip) && !v4Loopbacks.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	case teredo.Contains(ip):
		return netip.AddrFrom4([4]byte{^b[12], ^b[13], ^b[14], ^b[15]}), true
	}
	return netip.Addr{}, false
}

// allowedNameKey marks a dial for a host the admin's allowlist names.
type allowedNameKey struct{}

// checkDial is the dialer's check of the address it is about to use:
// never a refused one and, under an allowlist, one it lists (unless the
// host name was listed).
func (w *Webhooks) checkDial(ctx context.Context, network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	ip, err := netip.ParseAddr(host)
	if err != nil {
		return errRefusedAddr
	}
	if refused(ip) {
		return errRefusedAddr
	}
	if !w.cfg.Allow.empty() && ctx.Value(allowedNameKey{}) == nil && !w.cfg.Allow.addrAllowed(ip) {
		return errNotAllowed
	}
	return nil
}

var (
	errRefusedAddr = errors.New("refused address")
	errNotAllowed  = errors.New("not on the admin's allowlist")
	// errNotDelivered is every failed try that depends on what listens
	// there, so the answers cannot tell ports apart.
	errNotDelivered = errors.New("not delivered: no success answer within the time allowed")
)

// Set keeps s as its user's webhook here.
func (w *Webhooks) Set(s event.NotifySetting) error {
	if err := CheckURL(s.URL); err != nil {
		return err
	}
	if err := w.checkAllowed(s.URL); err != nil {
		return err
	}
	if err := w.store.PutSetting(s); err != nil {
		return err
	}
	w.keep(s)
	return nil
}

// Clear forgets user's webhook here.
func (w *Webhooks) Clear(user string) error {
	if _, had := w.setting(user); !had {
		return nil
	}
	if err := w.store.DeleteSetting(user); err != nil {
		return err
	}
	w.forget(user)
	return nil
}

// setting is user's webhook here, if this node keeps one.
func (w *Webhooks) setting(user string) (event.NotifySetting, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	s, ok := w.settings[user]
	return s, ok
}

// keep holds s as its user's webhook here, with a clean delivery record
// (the store has it already).
func (w *Webhooks) keep(s event.NotifySetting) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.settings[s.User] = s
	delete(w.status, s.User)
}

// forget drops user's webhook and its delivery record (the store has
// dropped it already).
func (w *Webhooks) forget(user string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.settings, user)
	delete(w.status, user)
}

// Status is user's webhook and how its deliveries went, as kept here.
func (w *Webhooks) Status(user string) Status {
	w.mu.Lock()
	defer w.mu.Unlock()
	var st Status
	s, ok := w.settings[user]
	if !ok {
		return st
	}
	st.Setting = &s
	if d := w.status[user]; d != nil {
		st.LastOK = d.lastOK
		st.Failures = append([]Failure(nil), d.failures...)
	}
	if q := w.queues[user]; q != nil {
		st.Pending = len(q)
	}
	return st
}

// Deliver posts n to its user's webhook, if this node keeps one, in the
// background: a person's notices go one at a time, each tried again with
// backoff until it lands or the tries run out (then it is a Failure).
func (w *Webhooks) Deliver(n event.Notice) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.settings[n.User]; !ok || w.ctx.Err() != nil {
		return
	}
	q := w.queues[n.User]
	if q == nil {
		q = make(chan event.Notice, userQueue)
		w.queues[n.User] = q
		w.wg.Add(1)
		go w.worker(n.User, q)
	}
	select {
	case q <- n:
	default:
		w.failLocked(n.User, n, errors.New("too many notices waiting for this webhook"), 0)
	}
}

// worker delivers one user's notices until the queue is empty.
func (w *Webhooks) worker(user string, q chan event.Notice) {
	defer w.wg.Done()
	for !w.drained(user, q) {
		w.retry(<-q)
	}
}

// drained reports whether user's queue q is empty, and then forgets it (a
// later notice starts a new worker); Deliver adds to q under the same lock.
func (w *Webhooks) drained(user string, q chan event.Notice) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if len(q) > 0 {
		return false
	}
	delete(w.queues, user)
	return true
}

func (w *Webhooks) retry(n event.Notice) {
	attempts := 0
	for i := 0; ; i++ {
		s, ok := w.setting(n.User)
		if !ok {
			return // they turned it off meanwhile
		}
		attempts++
		err := w.post(w.ctx, s, n)
		if err == nil {
			w.outcome(n, nil, attempts)
			return
		}
		if i >= len(w.cfg.Backoff) || w.ctx.Err() != nil {
			w.outcome(n, err, attempts)
			w.cfg.Log.Warn("webhook: gave up on a notice", "user", n.User, "attempts", attempts, "err", err)
			return
		}
		select {
		case <-w.ctx.Done():
		case <-w.clock.After(w.cfg.Backoff[i]):
		}
	}
}

func (w *Webhooks) deliveryLocked(user string) *delivery {
	d := w.status[user]
	if d == nil {
		d = &delivery{}
		w.status[user] = d
	}
	return d
}

func (w *Webhooks) failLocked(user string, n event.Notice, err error, attempts int) {
	d := w.deliveryLocked(user)
	d.failures = append(d.failures, Failure{At: w.clock.Now().Round(0), Text: n.Text, Err: err.Error(), Attempts: attempts})
	if len(d.failures) > maxFailures {
		d.failures = d.failures[len(d.failures)-maxFailures:]
	}
}

// Test posts n to user's webhook now, once, and says how it went; ok is
// false when this node keeps no webhook for them.
func (w *Webhooks) Test(ctx context.Context, n event.Notice) (ok bool, err error) {
	s, ok := w.setting(n.User)
	if !ok {
		return false, nil
	}
	start := w.clock.Now()
	err = w.post(ctx, s, n)
	if errors.Is(err, errNotDelivered) {
		// Told when the try's time is up, however early it failed: the
		// time it took must not tell a closed port from a silent one.
		if wait := w.cfg.Timeout - w.clock.Now().Sub(start); wait > 0 {
			select {
			case <-ctx.Done():
			case <-w.clock.After(wait):
			}
		}
	}
	w.outcome(n, err, 1)
	return true, err
}

// outcome records how delivering n went after attempts tries: a success
// (err nil) as the user's last good delivery, else a Failure.
func (w *Webhooks) outcome(n event.Notice, err error, attempts int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if err == nil {
		w.deliveryLocked(n.User).lastOK = w.clock.Now().Round(0)
		return
	}
	w.failLocked(n.User, n, err, attempts)
}

// Payload is the JSON body: "text" is what Slack and Mattermost read,
// "content" what Discord reads.
// "dibs" carries the notice's fields for a reader that files them (a
// chat service ignores a field it does not know).
type Payload struct {
	Text    string  `json:"text"`
	Content string  `json:"content"`
	Dibs    *Detail `json:"dibs,omitempty"`
}

// Detail is what a notice is about, field by field: its kind, the person
// it concerns, the node, the lease, and for a service its name and the
// state its replica is in.
type Detail struct {
	Kind    event.EventKind `json:"kind"`
	User    string          `json:"user"`
	Node    string          `json:"node"`
	Lease   string          `json:"lease,omitempty"`
	Entry   string          `json:"entry,omitempty"`
	Service string          `json:"service,omitempty"`
	State   string          `json:"state,omitempty"`
	At      time.Time       `json:"at"`
}

// post makes one try. Its error is for the person: one class for whatever
// depends on the port (never what the server answered); the detail goes to
// the log.
func (w *Webhooks) post(ctx context.Context, s event.NotifySetting, n event.Notice) error {
	if err := CheckURL(s.URL); err != nil {
		return err
	}
	if err := w.checkAllowed(s.URL); err != nil {
		return err
	}
	err := w.try(ctx, s, n)
	if err == nil || errors.Is(err, errRefusedAddr) || errors.Is(err, errNotAllowed) || errors.Is(err, errNoSuchHost) {
		return err
	}
	w.cfg.Log.Info("webhook: a try failed", "user", n.User, "err", err)
	return errNotDelivered
}

// errNoSuchHost is a host name that does not resolve: the same for every
// port, so it may be told.
var errNoSuchHost = errors.New("its host name does not resolve")

// try posts once and says exactly how it failed.
func (w *Webhooks) try(ctx context.Context, s event.NotifySetting, n event.Notice) error {
	u, _ := url.Parse(s.URL)
	if u != nil && w.cfg.Allow.nameAllowed(u.Hostname()) {
		ctx = context.WithValue(ctx, allowedNameKey{}, true)
	}
	text := "dibs: " + n.Text
	var body []byte
	ctype := "text/plain; charset=utf-8"
	if s.Format == event.WebhookJSON {
		p := Payload{Text: text, Content: text}
		if !n.Test {
			p.Dibs = &Detail{Kind: n.Kind, User: n.User, Node: n.Node, Lease: n.Lease, Entry: n.Entry, Service: n.Service, State: n.State, At: n.At}
		}
		body, _ = json.Marshal(p)
		ctype = "application/json"
	} else {
		body = []byte(text)
	}
	ctx, cancel := context.WithTimeout(ctx, w.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return errors.New("not a usable address")
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("User-Agent", w.cfg.UserAgent)
	if s.Format == event.WebhookText {
		req.Header.Set("Title", "dibs") // ntfy's notification title
	}
	resp, err := w.client.Do(req)
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, errRefusedAddr):
			return fmt.Errorf("the address resolves to a link-local, multicast, unspecified or cloud metadata address, which dibs does not post to: %w", errRefusedAddr)
		case errors.Is(err, errNotAllowed):
			return fmt.Errorf("the address resolves to one this node's admin has not listed in webhook_allow: %w", errNotAllowed)
		case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("timed out after %s", w.cfg.Timeout)
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) && dnsErr.IsNotFound {
			return errNoSuchHost
		}
		return fmt.Errorf("could not connect: %w", err)
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxWebhookAnswer))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered HTTP %d", resp.StatusCode)
	}
	return nil
}
