package replay

import (
	"github.com/dibs-gpu/dibs/queue"
)

// arrayRun is a job array during a replay: its tasks are submitted as its
// throttle lets them, as the array's origin makes them in dibs (and as
// SLURM releases an array's tasks under its %N limit).
type arrayRun struct {
	throttle int
	live     int
	pending  []*job
}

// addArray adds the tasks of array request r: each a queued request of its
// own (ID/INDEX) waiting from the array's submit time; as many as its
// throttle lets are submitted when the array is, the others as tasks end.
func (s *sim) addArray(r Request) {
	a, err := queue.ParseArray(r.Array)
	if err != nil {
		return // Check refused it already
	}
	ar := &arrayRun{throttle: a.Throttle}
	for _, idx := range a.Indices() {
		tr := r
		tr.ID, tr.Array, tr.Via = queue.ArrayTaskID(r.ID, idx), "", ViaQueue
		j := &job{r: tr, arr: ar}
		j.forgot = s.p == PolicySlack && s.roll(tr.ID, 0) < s.cfg.ForgetShare
		s.jobs = append(s.jobs, j)
		if ar.throttle == 0 || ar.live < ar.throttle {
			ar.live++
			s.push(tr.At, evSubmit, j)
		} else {
			ar.pending = append(ar.pending, j)
		}
	}
}

// taskOver frees the throttle's place of a task that ended or will never
// run, and submits the array's next task now.
func (s *sim) taskOver(j *job) {
	ar := j.arr
	if ar == nil {
		return
	}
	j.arr = nil // once
	ar.live--
	if len(ar.pending) > 0 {
		next := ar.pending[0]
		ar.pending = ar.pending[1:]
		ar.live++
		s.push(s.now, evSubmit, next)
	}
}
