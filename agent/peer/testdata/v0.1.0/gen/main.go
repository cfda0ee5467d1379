// Command gen writes the shape of every peer endpoint's request and reply
// JSON, as the agent/peer package of the tree it is built in declares
// them. It was run once in a copy of e4e3039 (v0.1.0) to make
// agent/peer/dialect_v6.json, the fields a v0.1.0 agent's strict decoder
// accepts:
//
//	git archive e4e3039 | tar -x -C /tmp/v010
//	mkdir /tmp/v010/cmd/dialectgen && cp main.go /tmp/v010/cmd/dialectgen/
//	(cd /tmp/v010 && go run ./cmd/dialectgen) > agent/peer/dialect_v6.json
//
// It lives under testdata so that the module's own build never sees it.
package main

import (
	"encoding"
	"encoding/json"
	"os"
	"reflect"
	"strings"

	"github.com/dibs-gpu/dibs/agent/peer"
)

// shape is a JSON value's shape: an object's known fields, or the shape of
// a list's (or a map's) elements; neither is a leaf taken whole.
type shape struct {
	Fields map[string]*shape `json:"fields,omitempty"`
	Elem   *shape            `json:"elem,omitempty"`
}

var (
	marshaler     = reflect.TypeFor[json.Marshaler]()
	textMarshaler = reflect.TypeFor[encoding.TextMarshaler]()
)

func shapeOf(t reflect.Type, seen map[reflect.Type]bool) *shape {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Implements(marshaler) || reflect.PointerTo(t).Implements(marshaler) ||
		t.Implements(textMarshaler) || reflect.PointerTo(t).Implements(textMarshaler) || seen[t] {
		return &shape{}
	}
	switch t.Kind() {
	case reflect.Struct:
		seen[t] = true
		defer delete(seen, t)
		s := &shape{Fields: map[string]*shape{}}
		addFields(s, t, seen)
		return s
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 {
			return &shape{}
		}
		return &shape{Elem: shapeOf(t.Elem(), seen)}
	case reflect.Map:
		return &shape{Elem: shapeOf(t.Elem(), seen)}
	}
	return &shape{}
}

func addFields(s *shape, t reflect.Type, seen map[reflect.Type]bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, _, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				addFields(s, ft, seen)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		s.Fields[name] = shapeOf(f.Type, seen)
	}
}

type endpoint struct {
	Req  *shape `json:"req"`
	Resp *shape `json:"resp"`
}

func add[Req, Resp peer.Message](out map[string]endpoint, e peer.Endpoint[Req, Resp]) {
	out[e.Name] = endpoint{
		Req:  shapeOf(reflect.TypeFor[Req](), map[reflect.Type]bool{}),
		Resp: shapeOf(reflect.TypeFor[Resp](), map[reflect.Type]bool{}),
	}
}

func main() {
	out := map[string]endpoint{}
	add(out, peer.Claim)
	add(out, peer.Release)
	add(out, peer.Extend)
	add(out, peer.Start)
	add(out, peer.Started)
	add(out, peer.Preempt)
	add(out, peer.Cancel)
	add(out, peer.Usage)
	add(out, peer.Refused)
	add(out, peer.Place)
	add(out, peer.Health)
	add(out, peer.History)
	add(out, peer.Book)
	add(out, peer.Events)
	add(out, peer.Notify)
	add(out, peer.NotifySet)
	add(out, peer.NotifyStatus)
	add(out, peer.Logs)
	b, err := json.MarshalIndent(struct {
		Protocol  int                 `json:"protocol"`
		Endpoints map[string]endpoint `json:"endpoints"`
	}{peer.Version, out}, "", " ")
	if err != nil {
		panic(err)
	}
	os.Stdout.Write(append(b, '\n'))
}
