// Package store keeps a node's leases, fencing-token counter, queue entries
// and usage ledger in a bbolt file. bbolt fsyncs every committed transaction,
// which is what "durable before acknowledged" needs; the file's lock is what
// stops a second agent on the same data dir.
//
// # The file (schema 2)
//
// One bbolt file, dibs.db, in the data dir, with four top-level buckets,
// two optional ones, and nothing else:
//
//	leases  key: lease id ("gpu-01-7")       value: a lease record (bookings too)
//	queue   key: queue entry id ("gpu-01-q3") value: a queue entry record
//	ledger  key: 8-byte big-endian sequence  value: a ledger record (an ended lease)
//	meta    key: name                        value: see below
//	events  key: 8-byte big-endian sequence  value: an event record (optional)
//	notify  key: user name                   value: a webhook setting (optional)
//
// The optional buckets (events.go) came after schema 2 and are made by
// their first write; a dibs from before them refuses a file that has them
// ("an unknown bucket"), so downgrading needs the file moved aside.
//
// A lease, queue or ledger value is
//
//	version (1 byte) | JSON of the record | CRC-32C (4 bytes, big-endian)
//
// The version byte (today 1) names the record's shape: leaseRecord,
// entryRecord and ledgerRecord in this package, whose JSON is frozen and
// independent of lease.Lease's tags, so the API and the gossip wire can change
// without changing the file. A booking is a lease record with "booked":
// true (lease.Lease.Booked), so it is as durable and as checked as a lease
// and needs no bucket of its own (an older dibs of schema 2 reads it as a
// lease). The meta values are fixed-size numbers followed
// by the same CRC-32C:
//
//	schema      8-byte big-endian 2 | CRC
//	last_token  8-byte big-endian highest fencing token granted | CRC
//	queue_seq   8-byte big-endian highest queue sequence used | CRC
//	sum_leases, sum_queue, sum_ledger, sum_events, sum_notify
//	            8-byte count | 8-byte sum of the records' CRCs (both big-endian,
//	            sums modulo 2^64) | CRC
//
// # The checksums
//
// Every value's CRC-32C (Castagnoli) covers the bucket name, a zero byte,
// the key's length (4 bytes, big-endian), the key, and the value before the
// checksum. It finds any single flipped bit, and any burst of up to 32, in
// the record, its key, or a record moved to another key or bucket. The sum_*
// records are updated in the same transaction as every write; they catch what
// a record's own checksum cannot: a record lost, repeated, or replaced by an
// older copy when a damaged page pointer leads to a page bbolt has freed.
//
// bbolt checks only its two header (meta) pages, and when the newer one fails
// it silently falls back to the older one, the state before the last write.
// So Open reads the whole file itself, without bbolt and with bounds-checked
// reads only, and refuses it unless both header pages pass their checksum,
// every page reachable from the newer one is in bounds, of the right type,
// named by its own id, referenced once and in key order, each branch key is
// the first key of the page it leads to (bbolt's own check allows less, but
// its writes corrupt the file without it), every record passes
// its checksum and decodes (ledger records: checksum only), and every bucket
// matches its sum. Only then does bbolt open it. A refused file is named,
// with what to do: move it aside to start empty, knowing its leases are lost.
// A damaged ledger (usage history) does not stop the agent: Open warns and
// Ledger reports it. Open holds the file in memory while it checks it; with
// 50 leases and a 20,000-entry ledger it takes about 30 ms (BenchmarkOpen).
//
// The freelist is not written (bbolt's NoFreelistSync): bbolt rebuilds it at
// open from the pages in use, so no damaged freelist can hand a live page to
// the next write.
//
// # Older files
//
// Schema 1 (dibs before checksums) stored lease.Lease's JSON bare, a raw
// 8-byte schema stamp, counters without checksums, and may lack the queue
// bucket. Open upgrades it to schema 2 in one transaction. When that write
// fails (a full or read-only disk) the store still opens and serves the leases
// it holds, with a warning (Warnings), and the next write that succeeds does
// the upgrade in its own transaction. A dibs of schema 1 refuses a schema-2
// file as written by another version.
package store
