package store

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/fnv"
)

// bbolt's file format (go.etcd.io/bbolt/internal/common), read here without
// bbolt. bbolt trusts its pages: a flipped page pointer can send its cursors
// round a cycle for ever, and its own checks run in goroutines that a damaged
// page kills the process from. So Open reads the file itself first, with
// bounds-checked slices only, and lets bbolt near it once it is known sound.
const (
	pageHeaderSize = 16 // id u64, flags u16, count u16, overflow u32
	elementSize    = 16 // leaf: flags, pos, ksize, vsize u32; branch: pos, ksize u32, pgid u64
	metaSize       = 64 // magic, version, page size, flags u32; root bucket 2×u64; freelist, pgid, txid, checksum u64
	bucketHdrSize  = 16 // root pgid u64, sequence u64

	boltMagic   = 0xED0CDAED
	boltVersion = 2

	flagBranch   = 0x01
	flagLeaf     = 0x02
	flagFreelist = 0x10
	flagBucket   = 0x01 // on a leaf element: its value is a nested bucket

	noFreelist = ^uint64(0)
)

// bbolt writes its headers in the machine's byte order.
var ne = binary.NativeEndian

// image is a bbolt file read whole and checked: every page reachable from
// the newest meta page is in bounds, of the right type, named by its own id,
// referenced once, and in key order, and the freelist (when the file keeps
// one) lists no page in use.
type image struct {
	txid    uint64
	buckets map[string][]kv
}

// kv is one record of a bucket.
type kv struct{ k, v []byte }

// readImage checks data, a whole bbolt file.
func readImage(data []byte) (*image, error) {
	m0, err := readMeta(data, 0)
	if err != nil {
		return nil, fmt.Errorf("header page 0: %w", err)
	}
	m1, err := readMeta(data, int(m0.pageSize))
	if err != nil {
		// bbolt would fall back to the other header, and so to the state
		// before the last write, which the agent may have acknowledged.
		return nil, fmt.Errorf("header page 1: %w", err)
	}
	m := m0
	if m1.txid > m0.txid {
		m = m1
	}
	if m0.txid == m1.txid || m0.pageSize != m1.pageSize {
		return nil, errors.New("the two header pages disagree")
	}
	w := &walker{data: data, ps: uint64(m.pageSize), hwm: m.pgid, seen: map[uint64]bool{0: true, 1: true}}
	if w.hwm > uint64(len(data))/w.ps {
		return nil, fmt.Errorf("the file is %d bytes but its header counts %d pages of %d: it was cut short", len(data), w.hwm, w.ps)
	}
	var top []kv
	if _, _, err := w.tree(m.root, nil, nil, &top, true); err != nil {
		return nil, err
	}
	img := &image{txid: m.txid, buckets: make(map[string][]kv)}
	for _, e := range top {
		if len(e.v) < bucketHdrSize {
			return nil, fmt.Errorf("bucket %q has a %d-byte header", e.k, len(e.v))
		}
		if _, dup := img.buckets[string(e.k)]; dup {
			return nil, fmt.Errorf("bucket %q appears twice", e.k)
		}
		var kvs []kv
		var err error
		if root := ne.Uint64(e.v); root != 0 {
			_, _, err = w.tree(root, nil, nil, &kvs, false)
		} else if _, _, err = w.node(e.v[bucketHdrSize:], false, nil, nil, &kvs, false); err != nil {
			err = fmt.Errorf("inline page: %w", err)
		}
		if err != nil {
			return nil, fmt.Errorf("bucket %q: %w", e.k, err)
		}
		img.buckets[string(e.k)] = kvs
	}
	if m.freelist != noFreelist {
		if err := w.freelist(m.freelist); err != nil {
			return nil, err
		}
	}
	return img, nil
}

type meta struct {
	pageSize uint32
	root     uint64
	freelist uint64
	pgid     uint64
	txid     uint64
}

func readMeta(data []byte, off int) (meta, error) {
	if off < 0 || len(data) < off+pageHeaderSize+metaSize {
		return meta{}, errors.New("missing: the file was cut short")
	}
	b := data[off+pageHeaderSize : off+pageHeaderSize+metaSize]
	h := fnv.New64a()
	h.Write(b[:56])
	switch {
	case ne.Uint32(b[0:]) != boltMagic:
		return meta{}, errors.New("not a bbolt header")
	case ne.Uint32(b[4:]) != boltVersion:
		return meta{}, fmt.Errorf("bbolt format %d, want %d", ne.Uint32(b[4:]), boltVersion)
	case h.Sum64() != ne.Uint64(b[56:]):
		return meta{}, errors.New("fails its checksum")
	}
	m := meta{pageSize: ne.Uint32(b[8:]), root: ne.Uint64(b[16:]), freelist: ne.Uint64(b[32:]), pgid: ne.Uint64(b[40:]), txid: ne.Uint64(b[48:])}
	if m.pageSize < pageHeaderSize+metaSize || m.pageSize&(m.pageSize-1) != 0 {
		return meta{}, fmt.Errorf("page size %d", m.pageSize)
	}
	return m, nil
}

// walker reads pages of one file and remembers which it has seen, so no page
// is read twice and no walk can loop.
type walker struct {
	data []byte
	ps   uint64
	hwm  uint64 // pages in use: ids at or past it are not part of the file
	seen map[uint64]bool
}

// page returns page id with its overflow pages, after checking its bounds,
// its type and that nothing else refers to it.
func (w *walker) page(id uint64, flags ...uint16) ([]byte, error) {
	if id < 2 || id >= w.hwm {
		return nil, fmt.Errorf("page %d is outside the file's %d pages", id, w.hwm)
	}
	p := w.data[id*w.ps : (id+1)*w.ps]
	if got := ne.Uint64(p); got != id {
		return nil, fmt.Errorf("page %d calls itself page %d", id, got)
	}
	f := ne.Uint16(p[8:])
	ok := false
	for _, want := range flags {
		ok = ok || f == want
	}
	if !ok {
		return nil, fmt.Errorf("page %d has type %#x, want %#x", id, f, flags)
	}
	over := uint64(ne.Uint32(p[12:]))
	if over >= w.hwm-id {
		return nil, fmt.Errorf("page %d runs %d pages past the file's %d", id, over, w.hwm)
	}
	for i := id; i <= id+over; i++ {
		if w.seen[i] {
			return nil, fmt.Errorf("page %d is referenced twice", i)
		}
		w.seen[i] = true
	}
	return w.data[id*w.ps : (id+over+1)*w.ps], nil
}

// tree walks the subtree at id. Its keys must lie in [lo, hi) the way bbolt's
// own check wants them, every key after the largest key before it. More than
// that check, a branch element's key must be the first key of the page it
// leads to: bbolt's writes rely on it (a changed child is found in its parent
// by that key) and corrupt the file when it is not. It returns the first and
// the largest key in the subtree. On the top level (top) every element must
// be a bucket and out gets their headers; below it none may be.
func (w *walker) tree(id uint64, lo, hi []byte, out *[]kv, top bool) (first, max []byte, err error) {
	p, err := w.page(id, flagBranch, flagLeaf)
	if err != nil {
		return nil, nil, err
	}
	first, max, err = w.node(p, ne.Uint16(p[8:]) == flagBranch, lo, hi, out, top)
	if err != nil {
		return nil, nil, fmt.Errorf("page %d: %w", id, err)
	}
	return first, max, nil
}

func (w *walker) node(p []byte, branch bool, lo, hi []byte, out *[]kv, top bool) (first, max []byte, err error) {
	if len(p) < pageHeaderSize {
		return nil, nil, errors.New("too short for a page header")
	}
	if !branch && ne.Uint16(p[8:]) != flagLeaf {
		return nil, nil, fmt.Errorf("type %#x, want a leaf", ne.Uint16(p[8:]))
	}
	count := uint64(ne.Uint16(p[10:]))
	if pageHeaderSize+count*elementSize > uint64(len(p)) {
		return nil, nil, fmt.Errorf("%d elements do not fit in %d bytes", count, len(p))
	}
	if branch && count == 0 {
		return nil, nil, errors.New("a branch with no elements")
	}
	prev := lo
	for i := range count {
		off := pageHeaderSize + i*elementSize
		el := p[off : off+elementSize]
		var pos, ksize, vsize uint64
		if branch {
			pos, ksize = uint64(ne.Uint32(el[0:])), uint64(ne.Uint32(el[4:]))
		} else {
			pos, ksize, vsize = uint64(ne.Uint32(el[4:])), uint64(ne.Uint32(el[8:])), uint64(ne.Uint32(el[12:]))
		}
		start := off + pos
		if start+ksize+vsize > uint64(len(p)) {
			return nil, nil, fmt.Errorf("element %d runs past the page", i)
		}
		key := p[start : start+ksize]
		if ksize == 0 {
			return nil, nil, fmt.Errorf("element %d has an empty key", i)
		}
		if i == 0 && prev != nil && bytes.Compare(prev, key) > 0 || i > 0 && bytes.Compare(prev, key) >= 0 {
			return nil, nil, fmt.Errorf("element %d is out of key order", i)
		}
		if hi != nil && bytes.Compare(key, hi) >= 0 {
			return nil, nil, fmt.Errorf("element %d is past the key of the next page", i)
		}
		if i == 0 {
			first = key
		}
		if !branch {
			if isBucket := ne.Uint32(el[0:])&flagBucket != 0; isBucket != top {
				if top {
					return nil, nil, fmt.Errorf("a record %q outside any bucket", key)
				}
				return nil, nil, fmt.Errorf("a bucket %q inside a bucket", key)
			}
			*out = append(*out, kv{k: key, v: p[start+ksize : start+ksize+vsize]})
			prev, max = key, key
			continue
		}
		next := hi
		if i+1 < count {
			noff := pageHeaderSize + (i+1)*elementSize
			np, nk := uint64(ne.Uint32(p[noff:])), uint64(ne.Uint32(p[noff+4:]))
			if noff+np+nk > uint64(len(p)) {
				return nil, nil, fmt.Errorf("element %d runs past the page", i+1)
			}
			next = p[noff+np : noff+np+nk]
		}
		f, m, err := w.tree(ne.Uint64(el[8:]), key, next, out, top)
		if err != nil {
			return nil, nil, err
		}
		if !bytes.Equal(f, key) {
			return nil, nil, fmt.Errorf("element %d's key is not the first key of page %d", i, ne.Uint64(el[8:]))
		}
		prev, max = m, m
	}
	return first, max, nil
}

// freelist checks the list of free pages a file written with a synced
// freelist (schema 1) keeps: bbolt would hand any page on it to the next
// write, so a page in use that it lists would be overwritten.
func (w *walker) freelist(id uint64) error {
	p, err := w.page(id, flagFreelist)
	if err != nil {
		return fmt.Errorf("freelist: %w", err)
	}
	count, first := uint64(ne.Uint16(p[10:])), uint64(0)
	if count == 0xFFFF {
		if len(p) < pageHeaderSize+8 {
			return errors.New("freelist: cut short")
		}
		count, first = ne.Uint64(p[pageHeaderSize:]), 1
	}
	if count > uint64(len(p))/8 || pageHeaderSize+(first+count)*8 > uint64(len(p)) {
		return fmt.Errorf("freelist: %d entries do not fit in its page", count)
	}
	free := make(map[uint64]bool, count)
	for i := range count {
		f := ne.Uint64(p[pageHeaderSize+(first+i)*8:])
		switch {
		case f < 2 || f >= w.hwm:
			return fmt.Errorf("freelist: page %d is outside the file's %d pages", f, w.hwm)
		case w.seen[f]:
			return fmt.Errorf("freelist: page %d is in use", f)
		case free[f]:
			return fmt.Errorf("freelist: page %d is listed twice", f)
		}
		free[f] = true
	}
	return nil
}
