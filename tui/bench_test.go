package tui

import (
	"testing"

	tea "charm.land/bubbletea/v2"
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
