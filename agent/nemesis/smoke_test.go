package nemesis

import (
	"testing"
	"time"
)

func TestSmoke(t *testing.T) {
	h := Run(t, Options{Duration: 40 * time.Second, Progress: func(s string) { t.Log(s) }})
	kinds := map[OpKind]map[Outcome]int{}
	for _, o := range h.Ops {
		if kinds[o.Kind] == nil {
			kinds[o.Kind] = map[Outcome]int{}
		}
		kinds[o.Kind][o.Outcome]++
	}
	t.Logf("ops %d %v writes %d", len(h.Ops), kinds, len(h.Writes))
	for _, f := range h.Faults {
		t.Logf("fault %+v", f)
	}
	for _, x := range h.Heals {
		t.Logf("heal %+v", x)
	}
	t.Logf("false dead %v", h.FalseDead)
	errs := map[string]int{}
	for _, o := range h.Ops {
		if o.Err != "" {
			errs[string(o.Kind)+" "+o.Err]++
		}
	}
	for e, n := range errs {
		t.Logf("%4d %s", n, e)
	}
}
