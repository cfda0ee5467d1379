// Package store keeps a node's leases, fencing-token counter and usage ledger
// in a bbolt file. bbolt fsyncs every committed transaction, which is what
// "durable before acknowledged" needs; the file's lock is what stops a second
// agent on the same data dir.
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
	"syscall"
	"time"

	"go.etcd.io/bbolt"

	"github.com/dibs-gpu/dibs/lease"
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

const schemaVersion = 1

// FileName is the bbolt file inside the data dir.
const FileName = "dibs.db"

// pidFileName names the file that says which agent holds the data dir, so a
// second agent can say whom to stop.
const pidFileName = "agent.pid"

// Bolt is a lease.Store on one bbolt file.
type Bolt struct {
	db      *bbolt.DB
	path    string
	pidPath string
}

var _ lease.Store = (*Bolt)(nil)

// Open opens (creating if needed) the store in dir. It fails fast, naming the
// holder, when another agent has the file, and refuses a file it cannot read
// rather than starting empty.
func Open(dir string) (*Bolt, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("create data dir %s: %w", dir, err)
	}
	path := filepath.Join(dir, FileName)
	pidPath := filepath.Join(dir, pidFileName)
	// bbolt takes an empty file for a new database. Open creates the file
	// and writes its first pages at once, so an empty one was emptied by
	// something else (a failed copy, a restore, a full disk): refuse it
	// rather than start with no leases.
	if fi, err := os.Stat(path); err == nil && fi.Size() == 0 {
		return nil, fmt.Errorf("lease store %s is empty (0 bytes), so its leases are lost: move it aside to start empty", path)
	}
	db, err := openBolt(path)
	if err != nil {
		if errors.Is(err, bbolt.ErrTimeout) {
			holder := "another process"
			if b, rerr := os.ReadFile(pidPath); rerr == nil {
				if pid := strings.TrimSpace(string(b)); pid != "" {
					holder = "another dibs agent (pid " + pid + ")"
				}
			}
			return nil, fmt.Errorf("data dir %s is in use by %s: stop it first, or give this agent its own --data-dir", dir, holder)
		}
		return nil, fmt.Errorf("open lease store %s: %w (the file may be corrupt: move it aside to start empty, knowing its leases are lost)", path, err)
	}
	s := &Bolt{db: db, path: path, pidPath: pidPath}
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

// openBolt opens the file, turning bbolt's panics on a damaged file into errors.
func openBolt(path string) (db *bbolt.DB, err error) {
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
	return bbolt.Open(path, 0o600, &bbolt.Options{Timeout: 300 * time.Millisecond})
}

func (s *Bolt) init() (err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("lease store %s is damaged (%v): move it aside to start empty, knowing its leases are lost", s.path, r)
		}
	}()
	// Write only when the file is new: an agent restarted on a full or
	// read-only disk must still come up and serve the leases it holds.
	ready := false
	err = s.db.View(func(tx *bbolt.Tx) error {
		for _, b := range [][]byte{bucketLeases, bucketMeta, bucketLedger, bucketQueue} {
			if tx.Bucket(b) == nil {
				return nil
			}
		}
		v := tx.Bucket(bucketMeta).Get(keySchema)
		ready = len(v) == 8 && binary.BigEndian.Uint64(v) == schemaVersion
		return nil
	})
	if err == nil && !ready {
		err = s.db.Update(s.create)
	}
	if err != nil {
		return fmt.Errorf("lease store %s: %w", s.path, s.explain(err))
	}
	// Read everything once so a damaged record stops the start, not a claim later.
	if _, _, err := s.Load(); err != nil {
		return err
	}
	return nil
}

// create makes the buckets and stamps the schema of a new file, and refuses a
// file of another schema.
func (s *Bolt) create(tx *bbolt.Tx) error {
	for _, b := range [][]byte{bucketLeases, bucketMeta, bucketLedger, bucketQueue} {
		if _, err := tx.CreateBucketIfNotExists(b); err != nil {
			return err
		}
	}
	meta := tx.Bucket(bucketMeta)
	if v := meta.Get(keySchema); v != nil {
		if len(v) != 8 || binary.BigEndian.Uint64(v) != schemaVersion {
			return fmt.Errorf("schema version %x, this dibs reads %d: it was written by another version of dibs; run that one, or move the file aside to start empty", v, schemaVersion)
		}
		return nil
	}
	return meta.Put(keySchema, u64(schemaVersion))
}

func u64(v uint64) []byte {
	b := make([]byte, 8)
	binary.BigEndian.PutUint64(b, v)
	return b
}

// Path is the bbolt file, for messages.
func (s *Bolt) Path() string { return s.path }

// Load implements lease.Store.
func (s *Bolt) Load() (leases []lease.Lease, lastToken uint64, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("lease store %s is damaged (%v): move it aside to start empty, knowing its leases are lost", s.path, r)
		}
	}()
	err = s.db.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keyToken); v != nil {
			if len(v) != 8 {
				return fmt.Errorf("token counter is %d bytes, want 8", len(v))
			}
			lastToken = binary.BigEndian.Uint64(v)
		}
		return tx.Bucket(bucketLeases).ForEach(func(k, v []byte) error {
			var l lease.Lease
			if err := json.Unmarshal(v, &l); err != nil {
				return fmt.Errorf("lease %q: %w", k, err)
			}
			if l.ID != string(k) || len(l.GPUs) == 0 {
				return fmt.Errorf("lease %q: record does not match its key", k)
			}
			leases = append(leases, l)
			return nil
		})
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read lease store %s: %w (move the file aside to start empty, knowing its leases are lost)", s.path, err)
	}
	return leases, lastToken, nil
}

// Put implements lease.Store.
func (s *Bolt) Put(l lease.Lease) error {
	v, err := json.Marshal(l)
	if err != nil {
		return fmt.Errorf("encode lease %s: %w", l.ID, err)
	}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		var last uint64
		if cur := meta.Get(keyToken); len(cur) == 8 {
			last = binary.BigEndian.Uint64(cur)
		}
		if l.Token > last {
			if err := meta.Put(keyToken, u64(l.Token)); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketLeases).Put([]byte(l.ID), v)
	})
	if err != nil {
		return fmt.Errorf("save lease %s: %w", l.ID, s.explain(err))
	}
	return nil
}

// End implements lease.Store.
func (s *Bolt) End(id string, e lease.LedgerEntry) error {
	v, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode ledger entry %s: %w", id, err)
	}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		if err := tx.Bucket(bucketLeases).Delete([]byte(id)); err != nil {
			return err
		}
		led := tx.Bucket(bucketLedger)
		seq, err := led.NextSequence()
		if err != nil {
			return err
		}
		return led.Put(u64(seq), v)
	})
	if err != nil {
		return fmt.Errorf("end lease %s: %w", id, s.explain(err))
	}
	return nil
}

// Ledger implements lease.Store.
func (s *Bolt) Ledger(since time.Time) ([]lease.LedgerEntry, error) {
	var out []lease.LedgerEntry
	err := s.db.View(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketLedger).ForEach(func(k, v []byte) error {
			var e lease.LedgerEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("ledger entry %x: %w", k, err)
			}
			if !e.End.Before(since) {
				out = append(out, e)
			}
			return nil
		})
	})
	if err != nil {
		return nil, fmt.Errorf("read ledger in %s: %w", s.path, err)
	}
	return out, nil
}

// Close releases the file lock so another agent may open the dir.
func (s *Bolt) Close() error {
	os.Remove(s.pidPath)
	return s.db.Close()
}

// explain turns a full disk into the refusal a person can act on.
func (s *Bolt) explain(err error) error {
	if errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT) || mentions(err, syscall.ENOSPC, syscall.EDQUOT) {
		return &lease.Error{Code: lease.CodeUnavailable, Msg: fmt.Sprintf("the disk holding %s is full, so dibs cannot record new leases: free some space and try again (reading leases still works)", s.path)}
	}
	if errors.Is(err, syscall.EROFS) || mentions(err, syscall.EROFS) {
		return &lease.Error{Code: lease.CodeUnavailable, Msg: fmt.Sprintf("%s is on a read-only file system, so dibs cannot record new leases", s.path)}
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

// PutEntry implements lease.Store.
func (s *Bolt) PutEntry(e lease.QueueEntry, seq uint64) error {
	v, err := json.Marshal(e)
	if err != nil {
		return fmt.Errorf("encode queue entry %s: %w", e.ID, err)
	}
	err = s.db.Update(func(tx *bbolt.Tx) error {
		meta := tx.Bucket(bucketMeta)
		if cur := meta.Get(keyQueueSeq); len(cur) != 8 || binary.BigEndian.Uint64(cur) < seq {
			if err := meta.Put(keyQueueSeq, u64(seq)); err != nil {
				return err
			}
		}
		return tx.Bucket(bucketQueue).Put([]byte(e.ID), v)
	})
	if err != nil {
		return fmt.Errorf("save queue entry %s: %w", e.ID, s.explain(err))
	}
	return nil
}

// DeleteEntry implements lease.Store.
func (s *Bolt) DeleteEntry(id string) error {
	err := s.db.Update(func(tx *bbolt.Tx) error {
		return tx.Bucket(bucketQueue).Delete([]byte(id))
	})
	if err != nil {
		return fmt.Errorf("remove queue entry %s: %w", id, s.explain(err))
	}
	return nil
}

// Entries implements lease.Store.
func (s *Bolt) Entries() (entries []lease.QueueEntry, lastSeq uint64, err error) {
	err = s.db.View(func(tx *bbolt.Tx) error {
		if v := tx.Bucket(bucketMeta).Get(keyQueueSeq); len(v) == 8 {
			lastSeq = binary.BigEndian.Uint64(v)
		}
		return tx.Bucket(bucketQueue).ForEach(func(k, v []byte) error {
			var e lease.QueueEntry
			if err := json.Unmarshal(v, &e); err != nil {
				return fmt.Errorf("queue entry %q: %w", k, err)
			}
			entries = append(entries, e)
			return nil
		})
	})
	if err != nil {
		return nil, 0, fmt.Errorf("read queue in %s: %w", s.path, err)
	}
	return entries, lastSeq, nil
}
