package tui

import (
	"fmt"
	"testing"
	"time"

	tea "charm.land/bubbletea/v2"

	"github.com/dibs-gpu/dibs/service"
)

// BenchmarkView32x8 is a full frame of a 32-node × 8-GPU cluster at 200×50,
// the board's budget being 2 ms.
func BenchmarkView32x8(b *testing.B) {
	for _, sz := range [][2]int{{200, 50}, {80, 24}} {
		b.Run(itoa(sz[0])+"x"+itoa(sz[1]), func(b *testing.B) {
			m := New(Options{Now: nowFunc})
			defer m.cancel()
			m.Update(tea.WindowSizeMsg{Width: sz[0], Height: sz[1]})
			m.Update(BoardMsg(bigBoard(32, 8)))
			for range 10 {
				m.Update(press("j"))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_ = m.View()
			}
		})
	}
}

// BenchmarkBoardUpdate is the work per board from the stream.
func BenchmarkBoardUpdate(b *testing.B) {
	m := New(Options{Now: nowFunc})
	defer m.cancel()
	m.Update(tea.WindowSizeMsg{Width: 200, Height: 50})
	board := bigBoard(32, 8)
	b.ReportAllocs()
	for b.Loop() {
		m.Update(BoardMsg(board))
	}
}

// BenchmarkView32x8Services is BenchmarkView32x8's cluster with one held
// GPU in three a service's (64 services, a few per user beyond what the
// policy allows, to be generous), drawn on the board and in the services
// view at 200×50: a board with services must cost what one without does.
func BenchmarkView32x8Services(b *testing.B) {
	board := bigBoard(32, 8)
	n := 0
	for ni := range board.Nodes {
		for gi := range board.Nodes[ni].GPUs {
			g := &board.Nodes[ni].GPUs[gi]
			if g.Lease == nil {
				continue
			}
			if n++; n%3 != 0 {
				continue
			}
			l := mkService(g.Lease.ID, g.Lease.Node, g.Lease.User, g.Lease.UID, g.Lease.GPUs, fmt.Sprintf("svc%d", n), 8000+n,
				service.Status{State: service.Healthy, Since: fixedNow.Add(-time.Hour), PID: 1000 + n})
			g.Lease = &l
			board.Services = append(board.Services, l)
		}
	}
	for _, view := range []string{"1", "6"} {
		b.Run(viewNames[view[0]-'1'], func(b *testing.B) {
			m := New(Options{Now: nowFunc})
			defer m.cancel()
			m.Update(tea.WindowSizeMsg{Width: 200, Height: 50})
			m.Update(BoardMsg(board))
			m.Update(press(view))
			for range 10 {
				m.Update(press("j"))
			}
			b.ReportAllocs()
			b.ResetTimer()
			for b.Loop() {
				_ = m.View()
			}
		})
	}
}
