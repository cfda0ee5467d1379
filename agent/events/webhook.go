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
	"github.com/dibs-gpu/dibs/lease"
)

// The agent (root) posts to an address a person chose. What keeps that
// from being more than a notification:
//   - only http and https, no user:password in the address;
//   - the body is always the notice, in one of two fixed shapes;
//   - no redirect is followed, and the answer is read at most 4 KiB and
//     never shown: a person sees "answered HTTP 404", "timed out", "could
//     not connect", not what the server said;
//   - link-local, multicast and unspecified addresses are refused when
//     dialled (after DNS, so a name cannot rebind to them): cloud metadata
//     services (169.254.169.254) live there;
//   - every try is bounded in time (5 s), and a person's notices are
//     delivered one at a time.
//
// Loopback and private addresses are allowed: an ntfy server on the team's
// network is the common case. docs/user-guide.md says so.
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
	Log       *slog.Logger
}

// Webhooks posts people's notices to the addresses they set, from the node
// that keeps their setting. Safe for concurrent use.
type Webhooks struct {
	cfg    WebhookConfig
	store  lease.EventStore
	clock  clock.Clock
	client *http.Client

	mu       sync.Mutex
	settings map[string]lease.NotifySetting
	status   map[string]*delivery
	queues   map[string]chan lease.Notice

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
	Setting  *lease.NotifySetting `json:"setting,omitempty"`
	LastOK   time.Time            `json:"last_ok,omitzero"`
	Failures []Failure            `json:"failures,omitempty"`
	Pending  int                  `json:"pending,omitempty"`
}

// NewWebhooks builds the webhooks over store; Open loads the settings.
func NewWebhooks(cfg WebhookConfig, store lease.EventStore, clk clock.Clock) *Webhooks {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Backoff == nil {
		cfg.Backoff = defaultBackoff
	}
	if cfg.UserAgent == "" {
		cfg.UserAgent = "dibs"
	}
	if clk == nil {
		clk = clock.Real()
	}
	w := &Webhooks{cfg: cfg, store: store, clock: clk, settings: map[string]lease.NotifySetting{},
		status: map[string]*delivery{}, queues: map[string]chan lease.Notice{}}
	w.client = &http.Client{
		Timeout: webhookTimeout,
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           (&net.Dialer{Timeout: webhookTimeout, Control: refuseSpecial}).DialContext,
			TLSHandshakeTimeout:   webhookTimeout,
			ResponseHeaderTimeout: webhookTimeout,
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
	if len(raw) > lease.MaxWebhookURL {
		return lease.Invalidf("the webhook address is over %d characters", lease.MaxWebhookURL)
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return lease.Invalidf("%q is not an http:// or https:// address: give the webhook URL your chat or ntfy shows you", clip(raw))
	}
	if u.User != nil {
		return lease.Invalidf("the webhook address carries a user or password; use a token in the path or query instead")
	}
	if strings.ContainsAny(raw, " \t\r\n") {
		return lease.Invalidf("the webhook address has spaces in it")
	}
	if ip, err := netip.ParseAddr(strings.Trim(u.Hostname(), "[]")); err == nil && special(ip) {
		return lease.Invalidf("dibs does not post to %s: link-local, multicast and unspecified addresses (a cloud's metadata service) are refused", ip)
	}
	return nil
}

func clip(s string) string {
	if len(s) > 60 {
		return s[:60] + "…"
	}
	return s
}

func special(ip netip.Addr) bool {
	ip = ip.Unmap()
	return ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() || ip.IsUnspecified()
}

// refuseSpecial is the dialer's check of the address it is about to use.
func refuseSpecial(network, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	if ip, err := netip.ParseAddr(host); err == nil && special(ip) {
		return errRefusedAddr
	}
	return nil
}

var errRefusedAddr = errors.New("refused address")

// Set keeps s as its user's webhook here.
func (w *Webhooks) Set(s lease.NotifySetting) error {
	if err := CheckURL(s.URL); err != nil {
		return err
	}
	if err := w.store.PutSetting(s); err != nil {
		return err
	}
	w.mu.Lock()
	w.settings[s.User] = s
	delete(w.status, s.User)
	w.mu.Unlock()
	return nil
}

// Clear forgets user's webhook here.
func (w *Webhooks) Clear(user string) error {
	w.mu.Lock()
	_, had := w.settings[user]
	w.mu.Unlock()
	if !had {
		return nil
	}
	if err := w.store.DeleteSetting(user); err != nil {
		return err
	}
	w.mu.Lock()
	delete(w.settings, user)
	delete(w.status, user)
	w.mu.Unlock()
	return nil
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
func (w *Webhooks) Deliver(n lease.Notice) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if _, ok := w.settings[n.User]; !ok || w.ctx.Err() != nil {
		return
	}
	q := w.queues[n.User]
	if q == nil {
		q = make(chan lease.Notice, userQueue)
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
func (w *Webhooks) worker(user string, q chan lease.Notice) {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		if len(q) == 0 {
			delete(w.queues, user)
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		w.retry(<-q)
	}
}

func (w *Webhooks) retry(n lease.Notice) {
	attempts := 0
	for i := 0; ; i++ {
		w.mu.Lock()
		s, ok := w.settings[n.User]
		w.mu.Unlock()
		if !ok {
			return // they turned it off meanwhile
		}
		attempts++
		err := w.post(w.ctx, s, n)
		if err == nil {
			w.mu.Lock()
			w.deliveryLocked(n.User).lastOK = w.clock.Now().Round(0)
			w.mu.Unlock()
			return
		}
		if i >= len(w.cfg.Backoff) || w.ctx.Err() != nil {
			w.mu.Lock()
			w.failLocked(n.User, n, err, attempts)
			w.mu.Unlock()
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

func (w *Webhooks) failLocked(user string, n lease.Notice, err error, attempts int) {
	d := w.deliveryLocked(user)
	d.failures = append(d.failures, Failure{At: w.clock.Now().Round(0), Text: n.Text, Err: err.Error(), Attempts: attempts})
	if len(d.failures) > maxFailures {
		d.failures = d.failures[len(d.failures)-maxFailures:]
	}
}

// Test posts n to user's webhook now, once, and says how it went; ok is
// false when this node keeps no webhook for them.
func (w *Webhooks) Test(ctx context.Context, n lease.Notice) (ok bool, err error) {
	w.mu.Lock()
	s, ok := w.settings[n.User]
	w.mu.Unlock()
	if !ok {
		return false, nil
	}
	err = w.post(ctx, s, n)
	w.mu.Lock()
	if err == nil {
		w.deliveryLocked(n.User).lastOK = w.clock.Now().Round(0)
	} else {
		w.failLocked(n.User, n, err, 1)
	}
	w.mu.Unlock()
	return true, err
}

// Payload is the JSON body: "text" is what Slack and Mattermost read,
// "content" what Discord reads.
type Payload struct {
	Text    string `json:"text"`
	Content string `json:"content"`
}

// post makes one try. Its error is for the person: a class, never what the
// server answered.
func (w *Webhooks) post(ctx context.Context, s lease.NotifySetting, n lease.Notice) error {
	if err := CheckURL(s.URL); err != nil {
		return err
	}
	text := "dibs: " + n.Text
	var body []byte
	ctype := "text/plain; charset=utf-8"
	if s.Format == lease.WebhookJSON {
		body, _ = json.Marshal(Payload{Text: text, Content: text})
		ctype = "application/json"
	} else {
		body = []byte(text)
	}
	ctx, cancel := context.WithTimeout(ctx, webhookTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL, bytes.NewReader(body))
	if err != nil {
		return errors.New("not a usable address")
	}
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("User-Agent", w.cfg.UserAgent)
	if s.Format == lease.WebhookText {
		req.Header.Set("Title", "dibs") // ntfy's notification title
	}
	resp, err := w.client.Do(req)
	if err != nil {
		var ne net.Error
		switch {
		case errors.Is(err, errRefusedAddr):
			return errors.New("the address resolves to a link-local, multicast or unspecified address, which dibs does not post to")
		case errors.As(err, &ne) && ne.Timeout(), errors.Is(err, context.DeadlineExceeded):
			return fmt.Errorf("timed out after %s", webhookTimeout)
		}
		var dnsErr *net.DNSError
		if errors.As(err, &dnsErr) {
			return errors.New("its host name does not resolve")
		}
		return errors.New("could not connect")
	}
	io.Copy(io.Discard, io.LimitReader(resp.Body, maxWebhookAnswer))
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("answered HTTP %d", resp.StatusCode)
	}
	return nil
}
