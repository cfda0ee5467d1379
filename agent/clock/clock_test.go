package clock

import (
	"testing"
	"time"
)

func TestFakeTickersAndTimers(t *testing.T) {
	start := time.Date(2026, 11, 30, 9, 0, 0, 0, time.UTC)
	f := NewFake(start)
	tk := f.NewTicker(time.Second)
	after := f.After(3 * time.Second)
	recv := func(ch <-chan time.Time) (time.Time, bool) {
		select {
		case v := <-ch:
			return v, true
		default:
			return time.Time{}, false
		}
	}
	if _, ok := recv(tk.C()); ok {
		t.Fatal("ticker fired before any time passed")
	}
	f.Advance(time.Second)
	if got, ok := recv(tk.C()); !ok || !got.Equal(start.Add(time.Second)) {
		t.Fatalf("ticker after 1s: %v %v", got, ok)
	}
	if _, ok := recv(after); ok {
		t.Fatal("3s timer fired after 1s")
	}
	f.Advance(5 * time.Second) // one tick delivered, like a time.Ticker with a slow reader
	if _, ok := recv(tk.C()); !ok {
		t.Fatal("ticker did not fire after 5s more")
	}
	if _, ok := recv(tk.C()); ok {
		t.Fatal("ticker queued more than one tick")
	}
	if _, ok := recv(after); !ok {
		t.Fatal("3s timer did not fire at 6s")
	}
	f.Set(start) // a step back fires nothing
	if _, ok := recv(tk.C()); ok {
		t.Fatal("a step back fired the ticker")
	}
	tk.Stop()
	f.Advance(time.Hour)
	if _, ok := recv(tk.C()); ok {
		t.Fatal("stopped ticker fired")
	}
	if got := f.Now(); !got.Equal(start.Add(time.Hour)) {
		t.Fatalf("Now = %v", got)
	}
}
