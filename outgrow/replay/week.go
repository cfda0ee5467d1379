package replay

import (
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/dibs-gpu/dibs/lease"
)

// WeekStart is the Monday the bundled week begins (00:00 UTC).
var WeekStart = time.Date(2026, 1, 5, 0, 0, 0, 0, time.UTC)

// Week is the bundled synthetic week (`dibs replay --trace week`): a team
// of six on four nodes of eight H100s, made from seed (the same seed, the
// same week). Who they are is written in docs/doctor.md:
//
//   - ana works at a shell all day: two or three sessions of one or two
//     GPUs, an hour or three of compute each, idle over lunch and
//     meetings, and now and then a session left open overnight;
//   - bo has a session a day and queues a multi-GPU run every evening;
//   - cy sweeps: on Monday, Wednesday and Friday, twice a day, two dozen
//     one-GPU runs of half an hour to an hour and a half;
//   - dee trains big: an 8-GPU run on Monday and Wednesday, a 3-node gang
//     on Tuesday, a 2-node gang on Thursday and one over the weekend;
//   - eli runs a 4-GPU job every weekday afternoon and checks results at
//     a one-GPU shell in the morning;
//   - fay is part-time: Tuesday and Thursday afternoons at a shell, a
//     small run on Saturday.
//
// Nobody works at night; the nights are when batch runs and forgotten
// sessions hold the GPUs.
func Week(seed uint64) Trace {
	g := weekGen{rng: rand.New(rand.NewPCG(seed, 0x5eed)), n: map[string]int{}}
	t := Trace{
		Name:  "week",
		Start: WeekStart,
		End:   WeekStart.Add(7 * 24 * time.Hour),
	}
	for i := 1; i <= 4; i++ {
		t.Nodes = append(t.Nodes, NodeSpec{Name: fmt.Sprintf("gpu%02d", i), Spec: "8xH100-80GB"})
	}
	for day := 0; day < 7; day++ {
		weekday := day < 5
		d := WeekStart.Add(time.Duration(day) * 24 * time.Hour)
		if weekday {
			// ana: sessions from about 9:00 to 18:00.
			at := g.jitter(d.Add(9*time.Hour), 30*time.Minute)
			sessions := 2 + g.rng.IntN(2)
			for s := 0; s < sessions; s++ {
				work := g.between(time.Hour, 3*time.Hour)
				idle := g.between(30*time.Minute, 2*time.Hour)
				if s == sessions-1 && g.rng.Float64() < 0.25 {
					idle = d.Add(33 * time.Hour).Sub(at.Add(work)) // left open until tomorrow 9:00
				}
				g.add(&t, Request{At: at, User: "ana", GPUs: 1 + g.rng.IntN(4), Kind: lease.KindInteractive, Work: work, Hold: work + idle})
				at = at.Add(work + idle + g.between(10*time.Minute, 40*time.Minute))
				if at.Sub(d) > 18*time.Hour {
					break
				}
			}
			// bo: a session around 10:30, a run at the end of the day.
			w := g.between(time.Hour, 2*time.Hour)
			g.add(&t, Request{At: g.jitter(d.Add(10*time.Hour+30*time.Minute), 30*time.Minute), User: "bo", GPUs: 1, Kind: lease.KindInteractive, Work: w, Hold: w + g.between(30*time.Minute, 90*time.Minute)})
			g.add(&t, Request{At: g.jitter(d.Add(18*time.Hour+30*time.Minute), 20*time.Minute), User: "bo", GPUs: 4 + 4*g.rng.IntN(2), Kind: lease.KindBatch,
				Work: g.between(8*time.Hour, 13*time.Hour), Limit: 12 * time.Hour, Via: ViaQueue})
			// eli: a shell in the morning, a 4-GPU job after lunch.
			g.add(&t, Request{At: g.jitter(d.Add(9*time.Hour+30*time.Minute), 20*time.Minute), User: "eli", GPUs: 1, Kind: lease.KindInteractive, Work: 45 * time.Minute, Hold: g.between(time.Hour, 2*time.Hour)})
			g.add(&t, Request{At: g.jitter(d.Add(13*time.Hour+30*time.Minute), 30*time.Minute), User: "eli", GPUs: 8, Kind: lease.KindBatch,
				Work: g.between(5*time.Hour, 9*time.Hour), Limit: 10 * time.Hour, Via: ViaQueue})
		}
		switch day {
		case 0, 2, 4: // cy's sweeps
			for _, h := range []time.Duration{11 * time.Hour, 16 * time.Hour} {
				at := g.jitter(d.Add(h), 20*time.Minute)
				for k := 0; k < 32; k++ {
					g.add(&t, Request{At: at.Add(time.Duration(k) * 5 * time.Second), User: "cy", GPUs: 1, Kind: lease.KindBatch,
						Work: g.between(45*time.Minute, 150*time.Minute), Limit: 2 * time.Hour, Via: ViaQueue})
				}
			}
		}
		switch day {
		case 0, 2: // dee: a full node
			g.add(&t, Request{At: g.jitter(d.Add(9*time.Hour+30*time.Minute), 15*time.Minute), User: "dee", GPUs: 8, Kind: lease.KindBatch,
				Work: g.between(10*time.Hour, 14*time.Hour), Limit: 16 * time.Hour, Via: ViaQueue})
		case 1: // dee: a 3-node gang
			g.add(&t, Request{At: g.jitter(d.Add(10*time.Hour), 15*time.Minute), User: "dee", Nodes: 3, GPUs: 8, Kind: lease.KindBatch,
				Work: g.between(18*time.Hour, 22*time.Hour), Limit: 24 * time.Hour})
		case 3: // dee: a 2-node gang
			g.add(&t, Request{At: g.jitter(d.Add(14*time.Hour), 15*time.Minute), User: "dee", Nodes: 2, GPUs: 8, Kind: lease.KindBatch,
				Work: g.between(10*time.Hour, 12*time.Hour), Limit: 16 * time.Hour})
		case 5: // dee: the weekend run
			g.add(&t, Request{At: g.jitter(d.Add(10*time.Hour), 30*time.Minute), User: "dee", Nodes: 4, GPUs: 8, Kind: lease.KindBatch,
				Work: g.between(24*time.Hour, 30*time.Hour), Limit: 36 * time.Hour})
		}
		switch day {
		case 1, 3: // fay at a shell
			w := g.between(90*time.Minute, 150*time.Minute)
			g.add(&t, Request{At: g.jitter(d.Add(14*time.Hour), 20*time.Minute), User: "fay", GPUs: 1, Kind: lease.KindInteractive, Work: w, Hold: w + g.between(30*time.Minute, time.Hour)})
		case 5: // fay's Saturday run
			g.add(&t, Request{At: g.jitter(d.Add(11*time.Hour), 30*time.Minute), User: "fay", GPUs: 2, Kind: lease.KindBatch, Work: 6 * time.Hour, Limit: 8 * time.Hour, Via: ViaQueue})
		}
	}
	return t
}

type weekGen struct {
	rng *rand.Rand
	n   map[string]int
}

func (g *weekGen) add(t *Trace, r Request) {
	g.n[r.User]++
	r.ID = fmt.Sprintf("%s-%d", r.User, g.n[r.User])
	r.At = r.At.Round(time.Second)
	r.Work = r.Work.Round(time.Minute)
	r.Hold = r.Hold.Round(time.Minute)
	if r.Hold < r.Work {
		r.Hold = r.Work
	}
	t.Requests = append(t.Requests, r)
}

// between draws a duration uniformly in [lo, hi].
func (g *weekGen) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(g.rng.Int64N(int64(hi-lo)+1))
}

// jitter moves t by up to ±d.
func (g *weekGen) jitter(t time.Time, d time.Duration) time.Time {
	return t.Add(g.between(-d, d))
}
