package nodeprobe

import (
	"reflect"
	"testing"
)

// TestEachStringCoversEveryField fills every string of a snapshot through
// reflection and checks EachString visits each one, so a field added later
// cannot reach a terminal without being escaped.
func TestEachStringCoversEveryField(t *testing.T) {
	s := Snapshot{GPUs: []GPU{{
		MIGDevices: make([]MIGDevice, 2),
		Links:      make([]Link, 3),
		Processes:  make([]Process, 2),
	}, {}}}
	want := fillStrings(reflect.ValueOf(&s).Elem())
	got := 0
	s.EachString(func(_ string, p *string) {
		if *p == "x" {
			got++
		}
	})
	if got != want {
		t.Errorf("EachString visits %d of the snapshot's %d strings", got, want)
	}
}

func fillStrings(v reflect.Value) int {
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
		return 1
	case reflect.Pointer:
		if v.IsNil() {
			return 0
		}
		return fillStrings(v.Elem())
	case reflect.Struct:
		n := 0
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				n += fillStrings(v.Field(i))
			}
		}
		return n
	case reflect.Slice:
		n := 0
		for i := range v.Len() {
			n += fillStrings(v.Index(i))
		}
		return n
	}
	return 0
}
