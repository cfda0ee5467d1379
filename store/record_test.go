package store

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// fill sets every field of v, recursively, to a value of its own that is not
// zero, so a field a conversion drops shows up as a difference.
func fill(t *testing.T, v reflect.Value, n *int) {
	t.Helper()
	*n++
	switch v.Kind() {
	case reflect.Struct:
		if v.Type() == reflect.TypeOf(time.Time{}) {
			v.Set(reflect.ValueOf(time.Date(2026, 3, 2, 9, 0, *n, *n*1000, time.UTC)))
			return
		}
		for i := range v.NumField() {
			fill(t, v.Field(i), n)
		}
	case reflect.Pointer:
		v.Set(reflect.New(v.Type().Elem()))
		fill(t, v.Elem(), n)
	case reflect.Slice:
		v.Set(reflect.MakeSlice(v.Type(), 2, 2))
		fill(t, v.Index(0), n)
		fill(t, v.Index(1), n)
	case reflect.Map:
		v.Set(reflect.MakeMap(v.Type()))
		for range 2 {
			k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
			fill(t, k, n)
			fill(t, e, n)
			v.SetMapIndex(k, e)
		}
	case reflect.String:
		v.SetString("s" + strings.Repeat("x", *n))
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int64:
		v.SetInt(int64(*n))
	case reflect.Uint64:
		v.SetUint(uint64(*n))
	case reflect.Uint8:
		v.SetUint(uint64(*n % 256))
	case reflect.Float64:
		v.SetFloat(float64(*n) + 0.5)
	default:
		t.Fatalf("fill: no value for a %s (%s): teach fill about it", v.Kind(), v.Type())
	}
}

// Every field of lease.Lease, queue.QueueEntry and lease.LedgerEntry survives
// the stored shape. A field added to one of them fails here until the record
// type stores it too.
func TestRecordsKeepEveryField(t *testing.T) {
	var n int
	var l lease.Lease
	var e queue.QueueEntry
	var g lease.LedgerEntry
	fill(t, reflect.ValueOf(&l).Elem(), &n)
	fill(t, reflect.ValueOf(&e).Elem(), &n)
	fill(t, reflect.ValueOf(&g).Elem(), &n)
	tests := []struct {
		name      string
		in        any
		roundTrip func() (any, error)
	}{
		{"lease", l, func() (any, error) {
			var r leaseRecord
			err := reencode(leaseToRecord(l), &r)
			return r.lease(), err
		}},
		{"queue entry", e, func() (any, error) {
			var r entryRecord
			err := reencode(entryToRecord(e), &r)
			return r.entry(), err
		}},
		{"ledger entry", g, func() (any, error) {
			var r ledgerRecord
			err := reencode(ledgerToRecord(g), &r)
			return r.entry(), err
		}},
	}
	for _, tt := range tests {
		got, err := tt.roundTrip()
		if err != nil {
			t.Fatalf("%s: %v", tt.name, err)
		}
		if !reflect.DeepEqual(got, tt.in) {
			t.Errorf("%s does not survive its record:\ngot  %+v\nwant %+v\nadd the missing field to the record type in record.go", tt.name, got, tt.in)
		}
	}
}

// reencode stores rec as the file does and reads it back into out.
func reencode(rec, out any) error {
	b, err := body(rec)
	if err != nil {
		return err
	}
	v := seal(bucketLeases, []byte("k"), b)
	p, _, err := payload(schemaVersion, bucketLeases, []byte("k"), v)
	if err != nil {
		return err
	}
	return json.Unmarshal(p, out)
}

// The stored JSON is the record's, not lease.Lease's: schema-1 files hold
// these names, so renaming a tag on lease.Lease must not rename it here.
func TestRecordJSONIsSchema1(t *testing.T) {
	r := leaseToRecord(lease.Lease{ID: "gpu-01-1", GPUs: []int{0}, Kind: lease.KindBatch, Gang: "g"})
	b, _ := json.Marshal(r)
	want := `{"id":"gpu-01-1","node":"","gpus":[0],"user":"","uid":0,"token":0,"kind":"batch","note":"","started_at":"0001-01-01T00:00:00Z","expires_at":"0001-01-01T00:00:00Z","gang":"g"}`
	if string(b) != want {
		t.Errorf("lease record JSON\ngot  %s\nwant %s", b, want)
	}
}

// The checksum catches every single-bit flip of a record, and a sound record
// under another key or in another bucket.
func TestChecksum(t *testing.T) {
	b, _ := body(leaseToRecord(lease.Lease{ID: "gpu-01-1", GPUs: []int{0, 1}, User: "alice"}))
	v := seal(bucketLeases, []byte("gpu-01-1"), b)
	if _, _, err := unseal(bucketLeases, []byte("gpu-01-1"), v); err != nil {
		t.Fatalf("sound record: %v", err)
	}
	for bit := range len(v) * 8 {
		f := append([]byte(nil), v...)
		f[bit/8] ^= 1 << (bit % 8)
		if _, _, err := unseal(bucketLeases, []byte("gpu-01-1"), f); err == nil {
			t.Errorf("flip of bit %d passes the checksum", bit)
		}
	}
	key := []byte("gpu-01-1")
	for bit := range len(key) * 8 {
		k := append([]byte(nil), key...)
		k[bit/8] ^= 1 << (bit % 8)
		if _, _, err := unseal(bucketLeases, k, v); err == nil {
			t.Errorf("the record passes under key %q", k)
		}
	}
	if _, _, err := unseal(bucketQueue, []byte("gpu-01-1"), v); err == nil {
		t.Error("a lease record passes in the queue bucket")
	}
	if _, _, err := unseal(bucketLeases, []byte("gpu-01-1"), v[:3]); err == nil {
		t.Error("a 3-byte record passes")
	}
}

// A record or stamp from a newer dibs is refused as such, not misread.
func TestNewerRecordVersion(t *testing.T) {
	b, _ := body(leaseToRecord(lease.Lease{ID: "gpu-01-1", GPUs: []int{0}}))
	b[0] = recordVersion + 1
	v := seal(bucketLeases, []byte("gpu-01-1"), b)
	if _, _, err := payload(schemaVersion, bucketLeases, []byte("gpu-01-1"), v); err == nil || !strings.Contains(err.Error(), "newer dibs") {
		t.Errorf("record version %d: %v, want a refusal naming a newer dibs", recordVersion+1, err)
	}
}
