package replay

import (
	"bytes"
	"strings"
	"testing"
	"time"
)

// TestArrayReplayKeepsItsThrottle: an array of six one-hour tasks with %2
// on a node of four GPUs runs two at a time, so in three rounds, under
// dibs and under SLURM; read from a trace line with "array".
func TestArrayReplayKeepsItsThrottle(t *testing.T) {
	in := `{"trace":{"nodes":[{"name":"n1","spec":"4xL40S"}],"start":"2026-01-05T09:00:00Z","end":"2026-01-05T18:00:00Z"}}
{"id":"sweep","at":"2026-01-05T09:00:00Z","user":"ana","gpus":1,"kind":"batch","limit":"2h","work":"1h","via":"queue","array":"0-5%2"}
`
	tr, err := Read(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []Policy{PolicyDibs, PolicySLURM} {
		t.Run(string(p), func(t *testing.T) {
			res, err := Run(tr, p, Config{})
			if err != nil {
				t.Fatal(err)
			}
			if res.Requests != 6 || res.Started != 6 {
				t.Fatalf("%d requests, %d started; want the 6 tasks", res.Requests, res.Started)
			}
			live, most := 0, 0
			starts := map[string]time.Time{}
			for _, st := range res.Steps {
				switch st.Kind {
				case StepStart:
					live++
					starts[st.Request] = st.At
				case StepEnd:
					live--
				}
				most = max(most, live)
			}
			if most != 2 {
				t.Errorf("at most %d tasks ran at once, want 2", most)
			}
			if got := starts["sweep/5"].Sub(tr.Start); got != 2*time.Hour {
				t.Errorf("the last task started %s in, want 2h (the third round)", got)
			}
		})
	}
	var b bytes.Buffer
	if err := Write(&b, tr); err != nil || !strings.Contains(b.String(), `"array":"0-5%2"`) {
		t.Errorf("Write lost the array: %v\n%s", err, b.String())
	}
	bad := strings.Replace(in, `"0-5%2"`, `"5-1"`, 1)
	if _, err := Read(strings.NewReader(bad)); err == nil || !strings.Contains(err.Error(), "backwards") {
		t.Errorf("a bad array: %v", err)
	}
}
