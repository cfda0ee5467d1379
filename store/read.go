package store

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/bbolt"

	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

// view is what the record readers need of one snapshot of the file: a bbolt
// transaction at run time, or the checked image at Open. One set of readers
// serves both, so what Open accepts is what Load reads.
type view interface {
	// get returns the value at key in bucket, nil when either is absent.
	get(bucket, key []byte) []byte
	// each calls fn for every record of bucket in key order; it reports
	// false when the bucket is absent.
	each(bucket []byte, fn func(k, v []byte) error) (bool, error)
	// buckets names the top-level buckets.
	buckets() []string
}

type txView struct{ tx *bbolt.Tx }

func (t txView) get(bucket, key []byte) []byte {
	if b := t.tx.Bucket(bucket); b != nil {
		return b.Get(key)
	}
	return nil
}

func (t txView) each(bucket []byte, fn func(k, v []byte) error) (bool, error) {
	b := t.tx.Bucket(bucket)
	if b == nil {
		return false, nil
	}
	return true, b.ForEach(func(k, v []byte) error {
		if v == nil {
			return fmt.Errorf("a bucket %q inside bucket %s", k, bucket)
		}
		return fn(k, v)
	})
}

func (t txView) buckets() []string {
	var out []string
	t.tx.ForEach(func(name []byte, _ *bbolt.Bucket) error {
		out = append(out, string(name))
		return nil
	})
	return out
}

type imageView struct{ img *image }

func (v imageView) get(bucket, key []byte) []byte {
	for _, e := range v.img.buckets[string(bucket)] {
		if bytes.Equal(e.k, key) {
			return e.v
		}
	}
	return nil
}

func (v imageView) each(bucket []byte, fn func(k, v []byte) error) (bool, error) {
	kvs, ok := v.img.buckets[string(bucket)]
	if !ok {
		return false, nil
	}
	for _, e := range kvs {
		if err := fn(e.k, e.v); err != nil {
			return true, err
		}
	}
	return true, nil
}

func (v imageView) buckets() []string {
	out := make([]string, 0, len(v.img.buckets))
	for name := range v.img.buckets {
		out = append(out, name)
	}
	return out
}

// damage marks an error found in the file's contents, as opposed to one the
// disk gave, so a write that meets it reports a damaged store.
type damage struct{ error }

func (d damage) Unwrap() error { return d.error }

// schemaOf reads the schema stamp and checks the top-level buckets against
// it. 0 means the file holds no buckets yet.
func schemaOf(v view) (int, error) {
	names := v.buckets()
	if len(names) == 0 {
		return 0, nil
	}
	st := v.get(bucketMeta, keySchema)
	var schema int
	switch {
	case st == nil:
		return 0, errors.New("it has no schema stamp")
	case len(st) == 8:
		// Schema 1 stamped 8 bare bytes; every later stamp starts with
		// the same 8 bytes, so any dibs can say which version wrote it.
		if n := binary.BigEndian.Uint64(st); n != 1 {
			return 0, versionError{n}
		}
		schema = 1
	default:
		b, _, err := unseal(bucketMeta, keySchema, st)
		if err != nil {
			return 0, fmt.Errorf("schema stamp: %w", err)
		}
		if len(b) != 8 {
			return 0, fmt.Errorf("schema stamp is %d bytes, want 8", len(b))
		}
		if n := binary.BigEndian.Uint64(b); n != schemaVersion {
			return 0, versionError{n}
		}
		schema = schemaVersion
	}
	known := []string{"leases", "meta", "ledger", "queue"}
	if schema == schemaVersion {
		known = append(known, optionalBuckets()...)
	}
	for _, n := range names {
		if !slices.Contains(known, n) {
			return 0, fmt.Errorf("an unknown bucket %q", n)
		}
	}
	required := []string{"leases", "meta", "ledger", "queue"}
	if schema == 1 {
		required = required[:3] // dibs before the queue had no queue bucket
	}
	for _, n := range required {
		if !slices.Contains(names, n) {
			return 0, fmt.Errorf("its %s bucket is missing", n)
		}
	}
	return schema, nil
}

// metaKeys are every key the meta bucket of a schema-2 file holds.
var metaKeys = [][]byte{keySchema, keyToken, keyQueueSeq, sumKey(bucketLeases), sumKey(bucketQueue), sumKey(bucketLedger),
	sumKey(bucketEvents), sumKey(bucketNotify)}

func sumKey(bucket []byte) []byte { return append([]byte("sum_"), bucket...) }

// checkAll reads everything the agent starts from: the meta values, the
// leases and the queue. (The ledger is read on its own: damage there costs
// usage history, not leases.)
func checkAll(v view, schema int) error {
	if _, err := readU64(v, schema, keyToken, "token counter"); err != nil {
		return err
	}
	if _, err := readU64(v, schema, keyQueueSeq, "queue sequence"); err != nil {
		return err
	}
	_, err := v.each(bucketMeta, func(k, val []byte) error {
		if schema == 1 {
			if !slices.ContainsFunc(metaKeys[:3], func(m []byte) bool { return bytes.Equal(m, k) }) {
				return fmt.Errorf("an unknown meta value %q", k)
			}
			return nil
		}
		if !slices.ContainsFunc(metaKeys, func(m []byte) bool { return bytes.Equal(m, k) }) {
			return fmt.Errorf("an unknown meta value %q", k)
		}
		if _, _, err := unseal(bucketMeta, k, val); err != nil {
			return fmt.Errorf("meta value %q: %w", k, err)
		}
		return nil
	})
	if err != nil {
		return err
	}
	if _, err := readLeases(v, schema); err != nil {
		return err
	}
	_, err = readEntries(v, schema)
	return err
}

// readU64 reads a counter from meta; schema 1 may lack it (zero).
func readU64(v view, schema int, key []byte, what string) (uint64, error) {
	val := v.get(bucketMeta, key)
	if schema == 1 {
		if val == nil {
			return 0, nil
		}
		if len(val) != 8 {
			return 0, fmt.Errorf("%s is %d bytes, want 8", what, len(val))
		}
		return binary.BigEndian.Uint64(val), nil
	}
	if val == nil {
		return 0, fmt.Errorf("%s is missing", what)
	}
	if len(val) != 8+sumSize {
		return 0, fmt.Errorf("%s is %d bytes, want %d", what, len(val), 8+sumSize)
	}
	b, _, err := unseal(bucketMeta, key, val)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", what, err)
	}
	return binary.BigEndian.Uint64(b), nil
}

// readDigest reads a bucket's stored count and sum.
func readDigest(v view, bucket []byte) (digest, error) {
	key := sumKey(bucket)
	val := v.get(bucketMeta, key)
	if val == nil {
		return digest{}, fmt.Errorf("the record count of %s is missing", bucket)
	}
	b, _, err := unseal(bucketMeta, key, val)
	if err != nil {
		return digest{}, fmt.Errorf("the record count of %s: %w", bucket, err)
	}
	if len(b) != 16 {
		return digest{}, fmt.Errorf("the record count of %s is %d bytes, want 16", bucket, len(b))
	}
	return digest{n: binary.BigEndian.Uint64(b), sum: binary.BigEndian.Uint64(b[8:])}, nil
}

// checkDigest compares what a reader counted with what the writes recorded.
func checkDigest(v view, schema int, bucket []byte, got digest) error {
	if schema < 2 {
		return nil
	}
	want, err := readDigest(v, bucket)
	if err != nil {
		return err
	}
	if got != want {
		return fmt.Errorf("%s holds %d records (checksums summing to %x), but the writes left %d (%x): records are missing, repeated or stale", bucket, got.n, got.sum, want.n, want.sum)
	}
	return nil
}

// payload checks a stored record and returns its JSON and checksum. Schema 1
// stored bare JSON.
func payload(schema int, bucket, k, v []byte) ([]byte, uint32, error) {
	if schema == 1 {
		return v, 0, nil
	}
	b, sum, err := unseal(bucket, k, v)
	if err != nil {
		return nil, 0, err
	}
	if len(b) == 0 || b[0] != recordVersion {
		return nil, 0, fmt.Errorf("record version %v, this dibs reads %d: it was written by a newer dibs", b[:min(1, len(b))], recordVersion)
	}
	return b[1:], sum, nil
}

func readLeases(v view, schema int) ([]lease.Lease, error) {
	return readRecords(v, schema, bucketLeases, "lease", func(k []byte, r *leaseRecord) (lease.Lease, bool) {
		// A service may hold no GPU (dibs serve -g 0).
		return r.lease(), r.ID == string(k) && (len(r.GPUs) > 0 || r.Kind == string(lease.KindService) && r.Service != nil)
	})
}

func readEntries(v view, schema int) ([]queue.QueueEntry, error) {
	return readRecords(v, schema, bucketQueue, "queue entry", func(k []byte, r *entryRecord) (queue.QueueEntry, bool) {
		return r.entry(), r.ID == string(k)
	})
}

// readRecords decodes every record of a bucket whose records are JSON of
// type R, checking each record's checksum and the bucket's digest; conv
// turns a record into what the store returns and says whether it matches
// its key.
func readRecords[R, T any](v view, schema int, bucket []byte, what string, conv func(k []byte, r *R) (T, bool)) ([]T, error) {
	var out []T
	var d digest
	_, err := v.each(bucket, func(k, val []byte) error {
		j, sum, err := payload(schema, bucket, k, val)
		if err == nil {
			var r R
			if err = json.Unmarshal(j, &r); err == nil {
				t, ok := conv(k, &r)
				if !ok {
					err = errors.New("record does not match its key")
				}
				out = append(out, t)
			}
		}
		if err != nil {
			return fmt.Errorf("%s %q: %w", what, k, err)
		}
		d.add(sum)
		return nil
	})
	if err == nil {
		err = checkDigest(v, schema, bucket, d)
	}
	return out, err
}

// checkLedger checks every ledger record's key, checksum and version, and the
// ledger's sum, without decoding the JSON: what Open does, fast for a
// ledger of years.
func checkLedger(v view, schema int) error {
	return eachLedger(v, schema, nil)
}

// readLedger returns the entries that ended at or after since. It reads every
// entry either way, to check them all against the ledger's sum.
func readLedger(v view, schema int, since time.Time) ([]lease.LedgerEntry, error) {
	var out []lease.LedgerEntry
	err := eachLedger(v, schema, func(j []byte) error {
		var r ledgerRecord
		if err := json.Unmarshal(j, &r); err != nil {
			return err
		}
		if !r.End.Before(since) {
			out = append(out, r.entry())
		}
		return nil
	})
	return out, err
}

// eachLedger walks the ledger checking every record's key, checksum and
// version, hands each record's JSON to f (nil: none is decoded), and
// checks the ledger's sum at the end: the one walk Open's check and every
// read share.
func eachLedger(v view, schema int, f func(j []byte) error) error {
	var d digest
	_, err := v.each(bucketLedger, func(k, val []byte) error {
		if len(k) != 8 {
			return fmt.Errorf("ledger key %x is not 8 bytes", k)
		}
		j, sum, err := payload(schema, bucketLedger, k, val)
		if err == nil && f != nil {
			err = f(j)
		}
		if err != nil {
			return fmt.Errorf("ledger entry %x: %w", k, err)
		}
		d.add(sum)
		return nil
	})
	if err == nil {
		err = checkDigest(v, schema, bucketLedger, d)
	}
	return err
}

// writer is one write transaction on a schema-2 file: every record it puts
// is sealed, and every bucket it touches has its sum brought up to date.
type writer struct {
	tx   *bbolt.Tx
	sums map[string]*digest
	// grant marks a transaction that writes a new lease: it carries no
	// events (Bolt.updateRiding).
	grant bool
}

func (w *writer) digest(bucket []byte) (*digest, error) {
	if d, ok := w.sums[string(bucket)]; ok {
		return d, nil
	}
	var d digest
	if w.tx.Bucket(bucketMeta).Get(sumKey(bucket)) != nil || !isOptional(bucket) {
		var err error
		if d, err = readDigest(txView{w.tx}, bucket); err != nil {
			return nil, damage{err}
		}
	}
	w.sums[string(bucket)] = &d
	return &d, nil
}

// isOptional reports whether bucket is one a file may lack (its sum then
// starts from nothing with the bucket's first record).
func isOptional(bucket []byte) bool { return slices.Contains(optionalBuckets(), string(bucket)) }

// put writes body under key, taking the old record's checksum out of the sum
// and the new one's in.
func (w *writer) put(bucket, key, body []byte) error {
	d, err := w.digest(bucket)
	if err != nil {
		return err
	}
	b := w.tx.Bucket(bucket)
	if old := b.Get(key); old != nil {
		_, sum, err := unseal(bucket, key, old)
		if err != nil {
			return damage{fmt.Errorf("%s %q: %w", bucket, key, err)}
		}
		d.remove(sum)
	}
	v := seal(bucket, key, body)
	d.add(binary.BigEndian.Uint32(v[len(v)-sumSize:]))
	return b.Put(key, v)
}

func (w *writer) delete(bucket, key []byte) error {
	b := w.tx.Bucket(bucket)
	old := b.Get(key)
	if old == nil {
		return nil
	}
	d, err := w.digest(bucket)
	if err != nil {
		return err
	}
	_, sum, err := unseal(bucket, key, old)
	if err != nil {
		return damage{fmt.Errorf("%s %q: %w", bucket, key, err)}
	}
	d.remove(sum)
	return b.Delete(key)
}

func (w *writer) u64(key []byte, what string) (uint64, error) {
	n, err := readU64(txView{w.tx}, schemaVersion, key, what)
	if err != nil {
		return 0, damage{err}
	}
	return n, nil
}

func (w *writer) setU64(key []byte, n uint64) error {
	return w.tx.Bucket(bucketMeta).Put(key, seal(bucketMeta, key, u64(n)))
}

// flush writes the sums of the buckets this transaction touched.
func (w *writer) flush() error {
	for name, d := range w.sums {
		key := sumKey([]byte(name))
		if err := w.tx.Bucket(bucketMeta).Put(key, seal(bucketMeta, key, d.bytes())); err != nil {
			return err
		}
	}
	return nil
}
