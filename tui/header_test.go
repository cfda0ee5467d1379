package tui

import (
	"strings"
	"testing"
	"time"
)

// TestHeaderCountsInTheSingular: a board of one node with one GPU says
// "1 node · 1 GPU", not "1 GPUs".
func TestHeaderCountsInTheSingular(t *testing.T) {
	h := newHarness(t, 80, 24, Options{})
	b := testBoard()
	b.Nodes = b.Nodes[:1]
	b.Nodes[0].GPUs = b.Nodes[0].GPUs[:1]
	b.Nodes[0].GPUs[0].Lease = nil
	b.GeneratedAt = fixedNow.Add(time.Second)
	h.send(BoardMsg(b))
	s := h.screen()
	if !strings.Contains(s, "1 node · 1 GPU · 1 free") || strings.Contains(s, "1 GPUs") {
		t.Errorf("header of a one-GPU board:\n%s", s)
	}
}
