package store

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/dibs-gpu/dibs/base/durable"
	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/event"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/queue"
)

var (
	bucketLeases = []byte("leases")
	bucketMeta   = []byte("meta")
	bucketLedger = []byte("ledger")
	bucketQueue  = []byte("queue")
	keyQueueSeq  = []byte("queue_seq")
	keyToken     = []byte("last_token")
	keySchema    = []byte("schema")
)

// schemaVersion is the layout this dibs writes; schema 1 it reads and upgrades.
const schemaVersion = 2

// FileName is the bbolt file inside the data dir.
const FileName = "dibs.db"

// pidFileName names the file that says which agent holds the data dir, so a
// second agent can say whom to stop.
const pidFileName = "agent.pid"

// Bolt is a queue.Store (leases, the ledger and queue entries) on one bbolt file.
type Bolt struct {
	db       *bbolt.DB
	path     string
	pidPath  string
	warnings []string
	rider    atomic.Pointer[rider]
}

var _ queue.Store = (*Bolt)(nil)

// DamagedError is a store that failed its checks: a record whose checksum
// fails, a bucket that does not add up, a page bbolt cannot trust. Starting
// anyway would hand out GPUs that are held, so the agent stops and says so.
type DamagedError struct {
	Path string
	Err  error
}

func (e *DamagedError) Error() string {
	return fmt.Sprintf("lease store %s is damaged (%v): move it aside to start empty, knowing its leases are lost", e.Path, e.Err)
}

func (e *DamagedError) Unwrap() error { return e.Err }

// versionError is a file of a schema this dibs does not read.
type versionError struct{ got uint64 }

func (e versionError) Error() string {
	return fmt.Sprintf("schema version %d, this dibs reads %d: it was written by another version of dibs; run that one, or move the file aside to start empty", e.got, schemaVersion)
}

// Open opens (creating if needed) the store in dir. It fails fast, naming the
// holder, when another agent has the file, and refuses a file that fails its
// checks rather than starting empty. Warnings says what it let pass.
func Open(dir string) (*Bolt, error) {
	// The data dir and a new file's name are synced into their parents:
	// bbolt syncs the file's pages but not the directory, and a power cut
	// loses a new name whose directory was never synced — with it every
	// lease acknowledged since (TestPowerCutKeepsEveryAcknowledgedLease).
	if err := durable.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	pidPath := filepath.Join(dir, pidFileName)
	s := &Bolt{path: path, pidPath: pidPath}
	// bbolt takes an empty file for a new database. Open creates the file
	// and writes its first pages at once, so an empty one was emptied by
	// something else (a failed copy, a restore, a full disk): refuse it
	// rather than start with no leases.
	fi, statErr := os.Stat(path)
	if errors.Is(statErr, os.ErrNotExist) {
		// A new file is made whole under another name and renamed into
		// place, so a power cut during an agent's first start leaves no
		// file or a whole one, never an empty or half-written dibs.db
		// that the checks below would refuse.
		if err := s.create(dir); err != nil {
			return nil, err
		}
		fi, statErr = os.Stat(path)
	}
	if statErr == nil && fi.Size() == 0 {
		return nil, fmt.Errorf("lease store %s is empty (0 bytes), so its leases are lost: move it aside to start empty", path)
	}
	if statErr == nil {
		if err := s.check(dir); err != nil {
			return nil, err
		}
	}
	db, err := openBolt(path, false)
	if err != nil && statErr == nil && errors.Is(err, syscall.EROFS) {
		// Serve what the file holds; every write says why it cannot.
		if db, err = openBolt(path, true); err == nil {
			s.warn("%s is on a read-only file system: dibs serves the leases it holds and refuses new ones; restart the agent once it can write there", path)
		}
	}
	if err != nil {
		return nil, s.openError(dir, err)
	}
	s.db = db
	if err := s.init(); err != nil {
		db.Close()
		return nil, err
	}
	if err := os.WriteFile(pidPath, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		// The pid file only names the holder in a second agent's refusal;
		// the bbolt lock is what keeps that agent out. A full disk must not
		// stop an agent from coming up to serve the leases it holds.
		os.Remove(pidPath)
	}
	return s, nil
}

// creatingSuffix names a new store file until it is whole.
const creatingSuffix = ".creating"

// create makes a new store file: written and synced under a temporary name
// (bbolt syncs its pages), renamed to FileName, and the directory synced.
// A leftover temporary file, from a cut during an earlier try, is replaced.
func (s *Bolt) create(dir string) error {
	tmp := s.path + creatingSuffix
	if err := os.Remove(tmp); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("create lease store %s: %w", s.path, err)
	}
	db, err := openBolt(tmp, false)
	if err != nil {
		return s.openError(dir, err)
	}
	if err := db.Update(create); err != nil {
		db.Close()
		return fmt.Errorf("create lease store %s: %w", s.path, s.explain(err))
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("create lease store %s: %w", s.path, err)
	}
	if err := os.Rename(tmp, s.path); err != nil {
		return fmt.Errorf("create lease store %s: %w", s.path, err)
	}
	if err := durable.SyncDir(dir); err != nil {
		return fmt.Errorf("create lease store %s: %w", s.path, err)
	}
	return nil
}

// openError says why bbolt would not open the file.
func (s *Bolt) openError(dir string, err error) error {
	switch {
	case errors.Is(err, bbolt.ErrTimeout):
		holder := "another process"
		if b, rerr := os.ReadFile(s.pidPath); rerr == nil {
			if pid := strings.TrimSpace(string(b)); pid != "" {
				holder = "another dibs agent (pid " + pid + ")"
			}
		}
		return fmt.Errorf("data dir %s is in use by %s: stop it first, or give this agent its own --data-dir", dir, holder)
	case errors.Is(err, syscall.EROFS):
		return fmt.Errorf("create lease store %s: the file system is read-only: give the agent a writable --data-dir", s.path)
	}
	return fmt.Errorf("open lease store %s: %w (the file may be corrupt: move it aside to start empty, knowing its leases are lost)", s.path, err)
}

// openBolt opens the file, turning bbolt's panics on a damaged file into errors.
func openBolt(path string, readOnly bool) (db *bbolt.DB, err error) {
	// A damaged file can point bbolt at pages past its end, which the mmap
	// turns into SIGBUS: make that a panic this goroutine can recover.
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			// bbolt panicked inside its Open with the file mapped and
			// locked and never handed it back: the lock lasts as long as
			// this process, so the agent must exit, not retry.
			err = fmt.Errorf("damaged database: %v", r)
		}
	}()
	return bbolt.Open(path, 0o600, &bbolt.Options{
		Timeout:  300 * time.Millisecond,
		ReadOnly: readOnly,
		// bbolt rebuilds the freelist from the pages in use at open,
		// so no damaged freelist page can hand a live page to a write.
		NoFreelistSync: true,
	})
}

// check reads the whole file under a shared lock (no agent is writing it) and
// refuses it unless it passes every check the package doc lists.
func (s *Bolt) check(dir string) error {
	db, err := openBolt(s.path, true)
	if err != nil {
		return s.openError(dir, err)
	}
	defer db.Close()
	data, err := os.ReadFile(s.path)
	if err != nil {
		return fmt.Errorf("read lease store %s: %w", s.path, err)
	}
	img, err := readImage(data)
	if err != nil {
		return &DamagedError{Path: s.path, Err: err}
	}
	v := imageView{img}
	schema, err := schemaOf(v)
	if err == nil && schema == 0 && img.txid > 1 {
		// A new file holds no buckets, and neither does one whose only
		// page of bucket names lost its count.
		err = fmt.Errorf("it holds no buckets, yet %d changes were written to it", img.txid-1)
	}
	if err == nil && schema > 0 {
		err = checkAll(v, schema)
	}
	if err != nil {
		return s.fail(err)
	}
	if schema > 0 {
		if err := checkLedger(v, schema); err != nil {
			s.warn("the usage ledger in %s is damaged (%v): leases and the queue are whole and served, but usage and fair-share cannot be read; move the file aside once no leases are held to start it afresh", s.path, err)
		}
		if err := checkOptional(v, schema); err != nil {
			s.warn("the event log or notification settings in %s are damaged (%v): leases and the queue are whole and served, but `dibs events` and webhooks cannot be read; move the file aside once no leases are held to start it afresh", s.path, err)
		}
	}
	return nil
}

// fail turns a reader's error into what Open, Load and the rest return.
func (s *Bolt) fail(err error) error {
	var ve versionError
	if errors.As(err, &ve) {
		return fmt.Errorf("lease store %s: %w", s.path, err)
	}
	return &DamagedError{Path: s.path, Err: err}
}

func (s *Bolt) warn(format string, args ...any) {
	s.warnings = append(s.warnings, fmt.Sprintf(format, args...))
}

// Warnings are what Open let pass that a person should hear about: a file
// still in the old format because the upgrade could not be written, a
// read-only disk, a damaged usage ledger. Each is one line saying what to do.
func (s *Bolt) Warnings() []string { return s.warnings }

// init makes the buckets of a new file, or upgrades a schema-1 file.
func (s *Bolt) init() error {
	var schema int
	if err := s.read(func(v view, n int) error { schema = n; return nil }); err != nil {
		return err
	}
	switch schema {
	case 0:
		if err := s.db.Update(create); err != nil {
			return fmt.Errorf("create lease store %s: %w", s.path, s.explain(err))
		}
	case 1:
		// Upgrade in one transaction. A disk that cannot take it must not
		// keep the agent from serving the leases it holds: the next write
		// that succeeds upgrades the file first, in its own transaction.
		if s.db.IsReadOnly() {
			s.warn("lease store %s is still in the old format, without checksums: it is upgraded when the agent starts with the file system writable", s.path)
		} else if err := s.db.Update(migrate); err != nil {
			s.warn("lease store %s is still in the old format, without checksums: upgrading it failed (%v); dibs serves its leases and upgrades it with the next change it can write", s.path, s.explain(err))
		}
	}
	return nil
}

// create makes the buckets of a new file and stamps its schema.
func create(tx *bbolt.Tx) error {
	for _, b := range [][]byte{bucketLeases, bucketMeta, bucketLedger, bucketQueue} {
		if _, err := tx.CreateBucket(b); err != nil {
			return err
		}
	}
	w := &writer{tx: tx, sums: map[string]*digest{}}
	for _, b := range [][]byte{bucketLeases, bucketLedger, bucketQueue} {
		w.sums[string(b)] = &digest{}
	}
	for _, k := range [][]byte{keyToken, keyQueueSeq} {
		if err := w.setU64(k, 0); err != nil {
			return err
		}
	}
	if err := w.setU64(keySchema, schemaVersion); err != nil {
		return err
	}
	return w.flush()
}

// migrate upgrades a schema-1 file: every record keeps its JSON (the record
// types here have schema 1's tags) and gains the version byte and its
// checksum; the counters gain theirs; the buckets gain their sums.
func migrate(tx *bbolt.Tx) error {
	v := txView{tx}
	token, err := readU64(v, 1, keyToken, "token counter")
	if err != nil {
		return damage{err}
	}
	seq, err := readU64(v, 1, keyQueueSeq, "queue sequence")
	if err != nil {
		return damage{err}
	}
	if _, err := tx.CreateBucketIfNotExists(bucketQueue); err != nil {
		return err
	}
	w := &writer{tx: tx, sums: map[string]*digest{}}
	for _, name := range [][]byte{bucketLeases, bucketQueue, bucketLedger} {
		b := tx.Bucket(name)
		var recs []kv
		err := b.ForEach(func(k, v []byte) error {
			if v == nil {
				return damage{fmt.Errorf("a bucket %q inside bucket %s", k, name)}
			}
			recs = append(recs, kv{k: clone(k), v: append([]byte{recordVersion}, v...)})
			return nil
		})
		if err != nil {
			return err
		}
		d := &digest{}
		w.sums[string(name)] = d
		for _, r := range recs {
			sealed := seal(name, r.k, r.v)
			d.add(binary.BigEndian.Uint32(sealed[len(sealed)-sumSize:]))
			if err := b.Put(r.k, sealed); err != nil {
				return err
			}
		}
	}
	for _, c := range []struct {
		key []byte
		n   uint64
	}{{keyToken, token}, {keyQueueSeq, seq}, {keySchema, schemaVersion}} {
		if err := w.setU64(c.key, c.n); err != nil {
			return err
		}
	}
	return w.flush()
}

func clone(b []byte) []byte { return append([]byte(nil), b...) }

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

// Path is the bbolt file, for messages.
func (s *Bolt) Path() string { return s.path }

// read runs fn on a snapshot of the file, turning damage (and a damaged page
// under a live mapping, which faults) into a DamagedError naming the file.
func (s *Bolt) read(fn func(v view, schema int) error) (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = &DamagedError{Path: s.path, Err: fmt.Errorf("%v", r)}
		}
	}()
	var inner error
	err = s.db.View(func(tx *bbolt.Tx) error {
		v := txView{tx}
		schema, err := schemaOf(v)
		if err == nil {
			err = fn(v, schema)
		}
		inner = err
		return err
	})
	if err != nil && err == inner {
		return s.fail(err)
	}
	if err != nil {
		return fmt.Errorf("read lease store %s: %w", s.path, err)
	}
	return nil
}

// update runs fn in one write transaction, upgrading a schema-1 file first,
// and writes the buckets' sums with it. op names the change for errors.
func (s *Bolt) update(op string, fn func(w *writer) error) error {
	return s.updateRiding(op, true, fn)
}

// updateRiding is update; with ride, the events waiting (RideEvents) go
// in the same transaction, unless fn marks it a grant (writer.grant): a
// claim's transaction carries nothing but the claim, so the event log adds
// nothing to what a claim waits for.
func (s *Bolt) updateRiding(op string, ride bool, fn func(w *writer) error) error {
	var riding []event.Event
	var carried bool
	r := s.rider.Load()
	err := s.db.Update(func(tx *bbolt.Tx) error {
		schema, err := schemaOf(txView{tx})
		switch {
		case err != nil:
			return damage{err}
		case schema == 0:
			return damage{errors.New("it holds no buckets")}
		case schema == 1:
			if err := migrate(tx); err != nil {
				return err
			}
		}
		w := &writer{tx: tx, sums: map[string]*digest{}}
		if err := fn(w); err != nil {
			return err
		}
		if ride && r != nil && !w.grant {
			riding = r.take()
			carried = len(riding) > 0 && w.ride(riding)
		}
		return w.flush()
	})
	if len(riding) > 0 {
		r.done(riding, err == nil && carried)
	}
	if err == nil {
		return nil
	}
	var d damage
	if errors.As(err, &d) {
		err = s.fail(d.error)
	} else {
		err = s.explain(err)
	}
	return fmt.Errorf("%s: %w", op, err)
}

// Load implements lease.Store.
func (s *Bolt) Load() (leases []lease.Lease, lastToken uint64, err error) {
	err = s.read(func(v view, schema int) error {
		if lastToken, err = readU64(v, schema, keyToken, "token counter"); err != nil {
			return err
		}
		leases, err = readLeases(v, schema)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return leases, lastToken, nil
}

// Put implements lease.Store.
func (s *Bolt) Put(l lease.Lease) error {
	op := "save lease " + l.ID
	if err := validLease(l); err != nil {
		return fmt.Errorf("%s: %w", op, err)
	}
	b, err := body(leaseToRecord(l))
	if err != nil {
		return fmt.Errorf("encode lease %s: %w", l.ID, err)
	}
	return s.update(op, func(w *writer) error {
		last, err := w.u64(keyToken, "token counter")
		if err != nil {
			return err
		}
		if l.Token > last {
			if err := w.setU64(keyToken, l.Token); err != nil {
				return err
			}
		}
		w.grant = w.tx.Bucket(bucketLeases).Get([]byte(l.ID)) == nil
		return w.put(bucketLeases, []byte(l.ID), b)
	})
}

// validLease refuses what Load would refuse to read back.
func validLease(l lease.Lease) error {
	if l.ID == "" || len(l.GPUs) == 0 && !l.IsService() {
		return errors.New("a lease needs an id and at least one GPU (a service may hold none)")
	}
	return nil
}

// End implements lease.Store.
func (s *Bolt) End(id string, e lease.LedgerEntry) error {
	b, err := body(ledgerToRecord(e))
	if err != nil {
		return fmt.Errorf("encode ledger entry %s: %w", id, err)
	}
	return s.update("end lease "+id, func(w *writer) error {
		if err := w.delete(bucketLeases, []byte(id)); err != nil {
			return err
		}
		// The next key follows the last one, not bbolt's bucket sequence:
		// that lives in a page header no checksum covers, and a damaged
		// one would overwrite old entries.
		next := uint64(1)
		if k, _ := w.tx.Bucket(bucketLedger).Cursor().Last(); k != nil {
			if len(k) != 8 {
				return damage{fmt.Errorf("ledger key %x is not 8 bytes", k)}
			}
			next = binary.BigEndian.Uint64(k) + 1
		}
		return w.put(bucketLedger, u64(next), b)
	})
}

// Ledger implements lease.Store.
func (s *Bolt) Ledger(since time.Time) (out []lease.LedgerEntry, err error) {
	err = s.read(func(v view, schema int) error {
		out, err = readLedger(v, schema, since)
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// PutEntry implements lease.Store.
func (s *Bolt) PutEntry(e queue.QueueEntry, seq uint64) error {
	op := "save queue entry " + e.ID
	if e.ID == "" {
		return fmt.Errorf("%s: a queue entry needs an id", op)
	}
	b, err := body(entryToRecord(e))
	if err != nil {
		return fmt.Errorf("encode queue entry %s: %w", e.ID, err)
	}
	return s.update(op, func(w *writer) error {
		cur, err := w.u64(keyQueueSeq, "queue sequence")
		if err != nil {
			return err
		}
		if cur < seq {
			if err := w.setU64(keyQueueSeq, seq); err != nil {
				return err
			}
		}
		return w.put(bucketQueue, []byte(e.ID), b)
	})
}

// DeleteEntry implements lease.Store.
func (s *Bolt) DeleteEntry(id string) error {
	return s.update("remove queue entry "+id, func(w *writer) error {
		return w.delete(bucketQueue, []byte(id))
	})
}

// Entries implements lease.Store.
func (s *Bolt) Entries() (entries []queue.QueueEntry, lastSeq uint64, err error) {
	err = s.read(func(v view, schema int) error {
		if lastSeq, err = readU64(v, schema, keyQueueSeq, "queue sequence"); err != nil {
			return err
		}
		entries, err = readEntries(v, schema)
		return err
	})
	if err != nil {
		return nil, 0, err
	}
	return entries, lastSeq, nil
}

// Close releases the file lock so another agent may open the dir.
func (s *Bolt) Close() error {
	os.Remove(s.pidPath)
	return s.db.Close()
}

// DiskFullError is the refusal a write gets when the disk holding path is
// full. It is exported so fakes (storetest) refuse in the same words.
func DiskFullError(path string) error {
	return &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("the disk holding %s is full, so dibs cannot record new leases: free some space and try again (reading leases still works)", path)}
}

// ReadOnlyError is the refusal a write gets when path is on a read-only file
// system.
func ReadOnlyError(path string) error {
	return &refusal.Error{Code: refusal.CodeUnavailable, Msg: fmt.Sprintf("%s is on a read-only file system, so dibs cannot record new leases", path)}
}

// explain turns a full or read-only disk into the refusal a person can act on.
func (s *Bolt) explain(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || mentions(err, syscall.ENOSPC, syscall.EDQUOT) {
		return DiskFullError(s.path)
	}
	if errors.Is(err, syscall.EROFS) || mentions(err, syscall.EROFS) || errors.Is(err, berrors.ErrDatabaseReadOnly) {
		return ReadOnlyError(s.path)
	}
	return err
}

// mentions reports whether err's text carries one of errnos: bbolt reports a
// failed grow or fsync with fmt.Errorf("...: %s", err), which drops the errno
// that errors.Is would find.
func mentions(err error, errnos ...syscall.Errno) bool {
	for _, e := range errnos {
		if strings.Contains(err.Error(), e.Error()) {
			return true
		}
	}
	return false
}

// CompactLedger implements lease.LedgerCompactor: the entries that ended
// before t are folded by lease.CompactLedger, whole days at a time until
// max entries went, in one transaction; each row takes the key of the
// first entry it replaces, so the ledger stays in the order it was written.
func (s *Bolt) CompactLedger(before time.Time, max int) (folded int, err error) {
	err = s.update("compact the ledger", func(w *writer) error {
		var keys [][]byte
		var old []lease.LedgerEntry
		c := w.tx.Bucket(bucketLedger).Cursor()
		for k, val := c.First(); k != nil; k, val = c.Next() {
			if len(k) != 8 {
				return damage{fmt.Errorf("ledger key %x is not 8 bytes", k)}
			}
			j, _, err := payload(schemaVersion, bucketLedger, k, val)
			if err != nil {
				return damage{fmt.Errorf("ledger entry %x: %w", k, err)}
			}
			var r ledgerRecord
			if err := json.Unmarshal(j, &r); err != nil {
				return damage{fmt.Errorf("ledger entry %x: %w", k, err)}
			}
			if r.End.Before(before) {
				keys, old = append(keys, clone(k)), append(old, r.entry())
			}
		}
		rows, replaced := lease.CompactLedger(old)
		for i, row := range rows {
			if folded > 0 && folded+len(replaced[i]) > max {
				break
			}
			b, err := body(ledgerToRecord(row))
			if err != nil {
				return fmt.Errorf("encode a compacted ledger row: %w", err)
			}
			for _, j := range replaced[i] {
				if err := w.delete(bucketLedger, keys[j]); err != nil {
					return err
				}
			}
			if err := w.put(bucketLedger, keys[replaced[i][0]], b); err != nil {
				return err
			}
			folded += len(replaced[i])
		}
		return nil
	})
	return folded, err
}

// EndFolded implements lease.LedgerFolder.
func (s *Bolt) EndFolded(id string, e lease.LedgerEntry, row uint64) (key uint64, err error) {
	err = s.update("end lease "+id, func(w *writer) error {
		if err := w.delete(bucketLeases, []byte(id)); err != nil {
			return err
		}
		b := w.tx.Bucket(bucketLedger)
		var folded lease.LedgerEntry
		if row != 0 {
			if val := b.Get(u64(row)); val != nil {
				j, _, err := payload(schemaVersion, bucketLedger, u64(row), val)
				if err != nil {
					return damage{fmt.Errorf("ledger entry %x: %w", row, err)}
				}
				var r ledgerRecord
				if err := json.Unmarshal(j, &r); err != nil {
					return damage{fmt.Errorf("ledger entry %x: %w", row, err)}
				}
				old := r.entry()
				if old.Reason == lease.ReasonCompacted && old.User == e.User &&
					old.End.UTC().Truncate(24*time.Hour).Equal(e.End.UTC().Truncate(24*time.Hour)) {
					folded, key = old, row
				}
			}
		}
		if key == 0 {
			key = 1
			if k, _ := b.Cursor().Last(); k != nil {
				if len(k) != 8 {
					return damage{fmt.Errorf("ledger key %x is not 8 bytes", k)}
				}
				key = binary.BigEndian.Uint64(k) + 1
			}
		}
		body, err := body(ledgerToRecord(lease.FoldInto(folded, e)))
		if err != nil {
			return fmt.Errorf("encode ledger entry %s: %w", id, err)
		}
		return w.put(bucketLedger, u64(key), body)
	})
	if err != nil {
		return 0, err
	}
	return key, nil
}
