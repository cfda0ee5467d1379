package events

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/event"
)

// Weak 4 of the third round: webhooks reached AWS's metadata service over
// IPv6, Alibaba's, and refused addresses written as NAT64. Every form of a
// refused address is refused, both when set and when dialled.
func TestWebhookRefusesMetadataInEveryForm(t *testing.T) {
	tests := []struct {
		name, addr string
	}{
		{"AWS IPv4", "169.254.169.254"},
		{"AWS IPv6", "fd00:ec2::254"},
		{"Alibaba", "100.100.100.200"},
		{"AWS as NAT64", "64:ff9b::a9fe:a9fe"},
		{"Alibaba as NAT64", "64:ff9b::6464:64c8"},
		{"Alibaba as local-use NAT64", "64:ff9b:1::6464:64c8"},
		{"AWS IPv4-mapped", "::ffff:169.254.169.254"},
		{"Alibaba IPv4-mapped", "::ffff:100.100.100.200"},
		{"Alibaba IPv4-compatible", "::100.100.100.200"},
		{"AWS as 6to4", "2002:a9fe:a9fe::1"},
		{"Alibaba as Teredo", "2001:0:4136:e378:8000:63bf:9b9b:9b37"},
		{"link-local IPv6", "fe80::1"},
		{"multicast", "ff02::1"},
	}
	w := NewWebhooks(WebhookConfig{Timeout: 100 * time.Millisecond}, NewMemStore(10), nil)
	t.Cleanup(w.Close)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ip := netip.MustParseAddr(tt.addr)
			url := "http://" + netip.AddrPortFrom(ip, 80).String() + "/latest/meta-data"
			if err := w.Set(event.NotifySetting{User: "alice", URL: url, Format: event.WebhookJSON, SetAt: t0}); err == nil {
				t.Errorf("set %s: accepted", url)
			}
			if err := w.checkDial(context.Background(), "tcp", net.JoinHostPort(tt.addr, "80"), nil); err != errRefusedAddr {
				t.Errorf("dial %s: got %v, want it refused", tt.addr, err)
			}
		})
	}
	for _, ok := range []string{"127.0.0.1", "10.1.2.3", "192.168.1.10", "2001:db8::1", "::1", "64:ff9b::a01:203"} {
		if err := w.checkDial(context.Background(), "tcp", net.JoinHostPort(ok, "80"), nil); err != nil {
			t.Errorf("dial %s: refused (%v), want allowed", ok, err)
		}
	}
}

// The three answer classes made a port scanner: a closed port said "could
// not connect" at once, an open one that is not HTTP "timed out", an HTTP
// server "answered HTTP 404". Now each says the same, at the same time.
func TestWebhookFailuresDoNotTellPortsApart(t *testing.T) {
	const timeout = 300 * time.Millisecond
	closed, _ := net.Listen("tcp", "127.0.0.1:0")
	closedAddr := closed.Addr().String()
	closed.Close()
	silent, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { silent.Close() })
	go func() {
		for {
			c, err := silent.Accept()
			if err != nil {
				return
			}
			t.Cleanup(func() { c.Close() })
		}
	}()
	notFound := httptest.NewServer(http.NotFoundHandler())
	t.Cleanup(notFound.Close)

	w := NewWebhooks(WebhookConfig{Timeout: timeout}, NewMemStore(10), nil)
	t.Cleanup(w.Close)
	var answers []string
	for _, addr := range []string{closedAddr, silent.Addr().String(), strings.TrimPrefix(notFound.URL, "http://")} {
		if err := w.Set(event.NotifySetting{User: "alice", URL: "http://" + addr + "/", Format: event.WebhookJSON, SetAt: t0}); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		_, err := w.Test(context.Background(), notice("probe"))
		took := time.Since(start)
		if err == nil {
			t.Fatalf("%s: the test post succeeded", addr)
		}
		if took < timeout-20*time.Millisecond {
			t.Errorf("%s: failed after %v, before the try's %v were up: the timing tells the port", addr, took, timeout)
		}
		answers = append(answers, err.Error())
	}
	for _, a := range answers[1:] {
		if a != answers[0] {
			t.Fatalf("a closed port, a silent one and an HTTP 404 answered %q: want one answer for all", answers)
		}
	}
}

// An admin's allowlist keeps webhooks to listed destinations: a host that
// is not listed is refused when set, a name that resolves outside the
// listed prefixes when dialled, and a listed name goes through.
func TestWebhookAllowlist(t *testing.T) {
	h := newHook(t, 0)
	port := h.srv.URL[strings.LastIndex(h.srv.URL, ":"):]
	tests := []struct {
		name     string
		allow    []string
		url      string
		setErr   string
		postErr  string
		received bool
	}{
		{"a literal outside the prefixes", []string{"10.0.0.0/8"}, "http://127.0.0.1" + port + "/", "allows webhooks only to listed destinations", "", false},
		{"a name that resolves outside them", []string{"10.0.0.0/8"}, "http://localhost" + port + "/", "", "webhook_allow", false},
		{"a listed prefix", []string{"127.0.0.0/8"}, "http://127.0.0.1" + port + "/", "", "", true},
		{"a listed name", []string{"localhost"}, "http://localhost" + port + "/", "", "", true},
		{"a listed domain", []string{".localhost"}, "http://localhost" + port + "/", "", "", true},
		{"an unlisted name, no prefixes", []string{"ntfy.example.net"}, "http://localhost" + port + "/", "allows webhooks only to listed destinations", "", false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			allow, err := ParseAllow(tt.allow)
			if err != nil {
				t.Fatal(err)
			}
			w := NewWebhooks(WebhookConfig{Timeout: 200 * time.Millisecond, Allow: allow}, NewMemStore(10), nil)
			t.Cleanup(w.Close)
			before := len(h.got())
			err = w.Set(event.NotifySetting{User: "alice", URL: tt.url, Format: event.WebhookJSON, SetAt: t0})
			if tt.setErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.setErr) {
					t.Fatalf("set %s: got %v, want %q", tt.url, err, tt.setErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("set %s: %v", tt.url, err)
			}
			_, err = w.Test(context.Background(), notice("hello"))
			switch {
			case tt.postErr == "" && err != nil:
				t.Errorf("post: %v", err)
			case tt.postErr != "" && (err == nil || !strings.Contains(err.Error(), tt.postErr)):
				t.Errorf("post: got %v, want %q", err, tt.postErr)
			}
			if got := len(h.got()) > before; got != tt.received {
				t.Errorf("the server received the post: %v, want %v", got, tt.received)
			}
		})
	}
	for _, bad := range []string{"http://x/", "a b", ""} {
		if _, err := ParseAllow([]string{bad}); err == nil {
			t.Errorf("ParseAllow(%q) accepted it", bad)
		}
	}
}
