// Package powercut is a FUSE file system for tests that loses, on command,
// what a power cut loses: everything not yet made durable by fsync or
// fdatasync. It passes every operation through to a backing directory (the
// live view, which is what a running program reads) and keeps, beside it,
// the durable view: what a disk would hold after the power went out now.
// Cut drops the live view, rebuilds it from the durable one and mounts it
// afresh, so nothing read before the cut (the kernel's page cache, a
// program's mmap) can survive into what is read after it.
//
// It is the LazyFS of Jepsen's etcd and Consul analyses, written for dibs's
// data directory (a bbolt file, small JSON files replaced by rename).
//
// # What it models
//
// The model is the weakest that POSIX allows and that ext4 with default
// options (data=ordered, auto_da_alloc) also shows in its worst case:
//
//   - File data and size are durable once the file is fsynced or
//     fdatasynced (both are treated alike): every write and truncation made
//     to it before the sync, through any name or handle.
//   - A directory entry — a new file or directory, a removal, a rename —
//     is durable once the directory that holds it is fsynced; a rename is
//     durable once either directory it touches is fsynced (it is one
//     journal record). A file's own fsync does not make its name durable:
//     a new file whose directory was never synced is gone after a cut,
//     even though its data was synced (ext4 often keeps it, because its
//     journal commits the creation with the data; nothing promises that).
//   - A rename without a directory fsync is lost: after a cut the old name
//     holds what it durably held before, and the new name what it durably
//     held before (often nothing). So the write-temp, fsync, rename,
//     fsync-dir pattern is what makes a replacement durable; without the
//     file's fsync the rename may bring an empty file (the zero-length file
//     of ext4's delayed allocation).
//   - A torn cut (CutTorn) keeps a random prefix of the operations not yet
//     synced, in the order they were made, and of the first one it drops,
//     if that is a write, a random prefix of its bytes: the disk had
//     written part of the tail when the power went. Any prefix is a state
//     a real disk may be left in (it may reorder more freely still).
//   - Permissions and owners are taken as they are when the file is created
//     or synced. Extended attributes, hard links, symlinks, device nodes
//     and fallocate are not modelled: the first passes through unrecorded,
//     the others are refused (EPERM/EOPNOTSUPP), so a program that needs
//     them fails loudly instead of passing on a model that does not hold.
//   - A directory rename moves every durable name below it at once.
//
// The server runs in the process that calls New. Never mmap a file of the
// mount from that process: a page fault is not a system call, so the Go
// runtime's stop-the-world waits for the faulting thread while the server
// goroutine that would answer it is stopped (bbolt reads through mmap).
// Run what uses the mount in another process, as the tests here do.
//
// Identity: every file and directory gets an id of its own when it is
// created (the backing file system reuses inode numbers), so a replaced
// file's durable content never leaks into a new file.
package powercut

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fs"
	"github.com/hanwen/go-fuse/v2/fuse"
)

// Options configures a file system.
type Options struct {
	// Seed chooses torn cuts' prefixes; 0 takes one from the clock.
	Seed uint64
}

// FS is a mounted power-cut file system. Its methods are safe to call
// from any goroutine.
type FS struct {
	backing string // the live view, passed through to
	durable string // one file per id: its durable content
	mnt     string
	rng     *rand.Rand

	mu      sync.Mutex
	server  *fuse.Server
	frozen  bool
	nextID  uint64
	ids     map[uint64]uint64 // live inode number → id
	names   map[string]uint64 // durable path (relative, "a/b") → id
	meta    map[uint64]meta   // id → kind and attributes
	pending []op              // not yet synced, in order

	stats Stats
}

// Stats counts what the file system saw, for a test's report.
type Stats struct {
	Cuts, TornCuts  int
	Syncs, DirSyncs int
	// Dropped counts the unsynced operations cuts threw away; Kept those a
	// torn cut kept.
	Dropped, Kept int
}

type meta struct {
	dir      bool
	mode     uint32
	uid, gid uint32
}

type opKind int

const (
	opWrite opKind = iota
	opTrunc
	opCreate
	opRemove
	opRename
)

// op is one change not yet durable.
type op struct {
	kind opKind
	id   uint64
	// write
	off  int64
	data []byte
	// trunc
	size int64
	// create, remove: path; rename: path → to
	path, to string
	meta     meta
}

// touches reports whether syncing directory dir makes o durable.
func (o *op) touches(dir string) bool {
	switch o.kind {
	case opCreate, opRemove:
		return parent(o.path) == dir
	case opRename:
		return parent(o.path) == dir || parent(o.to) == dir
	}
	return false
}

func parent(p string) string {
	d := path.Dir(p)
	if d == "." {
		return ""
	}
	return d
}

// New mounts a power-cut file system at mnt over the backing directory.
// Whatever backing holds now is taken as durable. durable is an empty
// directory outside both where the durable view is kept.
func New(backing, durable, mnt string, opts Options) (*FS, error) {
	seed := opts.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	p := &FS{backing: backing, durable: durable, mnt: mnt, rng: rand.New(rand.NewPCG(seed, 1))}
	if err := p.scan(); err != nil {
		return nil, err
	}
	if err := p.mount(); err != nil {
		return nil, err
	}
	return p, nil
}

// Dir is where the file system is mounted.
func (p *FS) Dir() string { return p.mnt }

// Stats returns the counts so far.
func (p *FS) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Pending is the number of operations not yet durable.
func (p *FS) Pending() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.pending)
}

// Freeze is the instant the power goes out: from now on every write,
// change and sync fails with EIO, so nothing more becomes durable while
// the test stops the programs using the mount. Cut freezes first.
func (p *FS) Freeze() {
	p.mu.Lock()
	p.frozen = true
	p.mu.Unlock()
}

// Cut cuts the power: it freezes, unmounts, drops every operation not yet
// durable, rebuilds the backing directory from the durable view and mounts
// it again. Stop the programs that use the mount first (a process that
// still holds a file open there keeps the old mount, lazily detached, and
// sees EIO).
func (p *FS) Cut() error { return p.cut(false) }

// CutTorn is Cut, except that the disk had written a random prefix of the
// unsynced operations (and part of the first one it had not) when the
// power went.
func (p *FS) CutTorn() error { return p.cut(true) }

// Close unmounts the file system, keeping the live view in backing.
func (p *FS) Close() error {
	p.Freeze()
	return p.unmount()
}

func (p *FS) cut(torn bool) error {
	p.Freeze()
	if err := p.unmount(); err != nil {
		return err
	}
	p.mu.Lock()
	keep := 0
	if torn {
		keep = p.rng.IntN(len(p.pending) + 1)
		for i := 0; i < keep; i++ {
			if err := p.apply(&p.pending[i]); err != nil {
				p.mu.Unlock()
				return err
			}
		}
		if keep < len(p.pending) && p.pending[keep].kind == opWrite && len(p.pending[keep].data) > 1 {
			o := p.pending[keep]
			o.data = o.data[:1+p.rng.IntN(len(o.data)-1)]
			if err := p.apply(&o); err != nil {
				p.mu.Unlock()
				return err
			}
		}
		p.stats.TornCuts++
		p.stats.Kept += keep
	}
	p.stats.Cuts++
	p.stats.Dropped += len(p.pending) - keep
	p.pending = nil
	err := p.rebuild()
	p.mu.Unlock()
	if err != nil {
		return err
	}
	if err := p.scan(); err != nil {
		return err
	}
	return p.mount()
}

func (p *FS) mount() error {
	var st syscall.Stat_t
	if err := syscall.Stat(p.backing, &st); err != nil {
		return fmt.Errorf("powercut: stat backing dir: %w", err)
	}
	root := &fs.LoopbackRoot{Path: p.backing, Dev: uint64(st.Dev)}
	root.NewNode = func(r *fs.LoopbackRoot, _ *fs.Inode, _ string, _ *syscall.Stat_t) fs.InodeEmbedder {
		return &node{LoopbackNode: fs.LoopbackNode{RootData: r}, p: p}
	}
	root.RootNode = root.NewNode(root, nil, "", &st)
	zero := time.Duration(0)
	srv, err := fs.Mount(p.mnt, root.RootNode, &fs.Options{
		MountOptions: fuse.MountOptions{
			FsName: "powercut", Name: "powercut",
			// As root, mount(2) directly: no fusermount needed.
			DirectMount: true,
			AllowOther:  os.Geteuid() == 0,
		},
		// The kernel asks for every name and attribute: nothing it
		// remembers can outlive a cut, and no cached answer hides a
		// change the model made.
		EntryTimeout: &zero, AttrTimeout: &zero, NegativeTimeout: &zero,
	})
	if err != nil {
		return fmt.Errorf("powercut: mount %s: %w", p.mnt, err)
	}
	p.mu.Lock()
	p.server, p.frozen = srv, false
	p.mu.Unlock()
	return nil
}

func (p *FS) unmount() error {
	p.mu.Lock()
	srv := p.server
	p.server = nil
	p.mu.Unlock()
	if srv == nil {
		return nil
	}
	if err := srv.Unmount(); err != nil {
		// Something still holds a file there: detach it, so the next
		// mount is fresh; the holder sees EIO from the frozen server
		// until the server goes.
		if derr := syscall.Unmount(p.mnt, syscall.MNT_DETACH); derr != nil {
			return fmt.Errorf("powercut: unmount %s: %v; detach: %w", p.mnt, err, derr)
		}
	}
	go srv.Wait()
	return nil
}

// scan takes the backing directory as wholly durable: ids for every file,
// their content copied into the durable view.
func (p *FS) scan() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := clearDir(p.durable); err != nil {
		return err
	}
	p.ids, p.names, p.meta, p.pending = map[uint64]uint64{}, map[string]uint64{}, map[uint64]meta{}, nil
	return filepath.Walk(p.backing, func(full string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(p.backing, full)
		if rel == "." {
			return nil
		}
		st := fi.Sys().(*syscall.Stat_t)
		id := p.newID(st.Ino)
		m := meta{dir: fi.IsDir(), mode: st.Mode & 0o7777, uid: st.Uid, gid: st.Gid}
		p.meta[id] = m
		p.names[filepath.ToSlash(rel)] = id
		if fi.Mode().IsRegular() {
			return copyFile(full, p.dataPath(id))
		}
		if !fi.IsDir() {
			return fmt.Errorf("powercut: %s is neither a file nor a directory, which the model does not cover", full)
		}
		return nil
	})
}

// rebuild replaces the backing directory's contents with the durable view.
func (p *FS) rebuild() error {
	if err := clearDir(p.backing); err != nil {
		return err
	}
	paths := slices.Collect(func(yield func(string) bool) {
		for k := range p.names {
			if !yield(k) {
				return
			}
		}
	})
	// Parents before children.
	slices.SortFunc(paths, func(a, b string) int {
		if c := strings.Count(a, "/") - strings.Count(b, "/"); c != 0 {
			return c
		}
		return strings.Compare(a, b)
	})
	made := map[string]bool{"": true}
	for _, rel := range paths {
		if !made[parent(rel)] {
			continue // its directory's entry was never durable: an orphan
		}
		id := p.names[rel]
		m := p.meta[id]
		full := filepath.Join(p.backing, filepath.FromSlash(rel))
		if m.dir {
			if err := os.Mkdir(full, os.FileMode(m.mode)); err != nil {
				return fmt.Errorf("powercut: rebuild: %w", err)
			}
			made[rel] = true
		} else if err := copyFile(p.dataPath(id), full); errors.Is(err, os.ErrNotExist) {
			// Its name is durable, its data never was: empty.
			if err := os.WriteFile(full, nil, 0o600); err != nil {
				return fmt.Errorf("powercut: rebuild: %w", err)
			}
		} else if err != nil {
			return err
		}
		if err := os.Chmod(full, os.FileMode(m.mode)); err != nil {
			return fmt.Errorf("powercut: rebuild: %w", err)
		}
		if err := os.Lchown(full, int(m.uid), int(m.gid)); err != nil && os.Geteuid() == 0 {
			return fmt.Errorf("powercut: rebuild: %w", err)
		}
	}
	return nil
}

func (p *FS) newID(ino uint64) uint64 {
	p.nextID++
	p.ids[ino] = p.nextID
	return p.nextID
}

// idOf returns the id of the live inode ino, giving it one if it has none
// (cannot happen for what was created through the mount or scanned).
func (p *FS) idOf(ino uint64) uint64 {
	if id, ok := p.ids[ino]; ok {
		return id
	}
	return p.newID(ino)
}

func (p *FS) dataPath(id uint64) string {
	return filepath.Join(p.durable, strconv.FormatUint(id, 10))
}

// record adds o to the operations not yet durable, unless the power is out.
func (p *FS) record(o op) syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		return syscall.EIO
	}
	p.pending = append(p.pending, o)
	return 0
}

// syncFile makes every pending write and truncation of the live inode ino
// durable.
func (p *FS) syncFile(ino uint64, m *meta) syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		return syscall.EIO
	}
	id := p.idOf(ino)
	if m != nil {
		old := p.meta[id]
		m.dir = old.dir
		p.meta[id] = *m
	}
	p.stats.Syncs++
	return p.syncWhere(func(o *op) bool { return (o.kind == opWrite || o.kind == opTrunc) && o.id == id })
}

// syncDir makes every pending entry change in the directory rel durable.
func (p *FS) syncDir(rel string) syscall.Errno {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.frozen {
		return syscall.EIO
	}
	p.stats.DirSyncs++
	return p.syncWhere(func(o *op) bool { return o.touches(rel) })
}

func (p *FS) syncWhere(match func(*op) bool) syscall.Errno {
	kept := p.pending[:0]
	var err error
	for i := range p.pending {
		o := &p.pending[i]
		if match(o) {
			if err == nil {
				err = p.apply(o)
			}
			continue
		}
		kept = append(kept, *o)
	}
	clear(p.pending[len(kept):])
	p.pending = kept
	if err != nil {
		return syscall.EIO
	}
	return 0
}

// apply makes o durable.
func (p *FS) apply(o *op) error {
	switch o.kind {
	case opWrite:
		f, err := os.OpenFile(p.dataPath(o.id), os.O_WRONLY|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		_, err = f.WriteAt(o.data, o.off)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	case opTrunc:
		f, err := os.OpenFile(p.dataPath(o.id), os.O_WRONLY|os.O_CREATE, 0o600)
		if err != nil {
			return err
		}
		err = f.Truncate(o.size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	case opCreate:
		p.names[o.path] = o.id
		if _, ok := p.meta[o.id]; !ok {
			p.meta[o.id] = o.meta
		}
	case opRemove:
		if p.names[o.path] == o.id {
			delete(p.names, o.path)
		}
	case opRename:
		if p.meta[o.id].dir {
			for k, v := range p.names {
				if strings.HasPrefix(k, o.path+"/") {
					delete(p.names, k)
					p.names[o.to+k[len(o.path):]] = v
				}
			}
		}
		if p.names[o.path] == o.id {
			delete(p.names, o.path)
		}
		p.names[o.to] = o.id
		if _, ok := p.meta[o.id]; !ok {
			p.meta[o.id] = o.meta
		}
	}
	return nil
}

func clearDir(dir string) error {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return fmt.Errorf("powercut: %w", err)
	}
	for _, e := range ents {
		if err := os.RemoveAll(filepath.Join(dir, e.Name())); err != nil {
			return fmt.Errorf("powercut: %w", err)
		}
	}
	return nil
}

func copyFile(from, to string) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return fmt.Errorf("powercut: %w", err)
	}
	_, err = io.Copy(out, in)
	if cerr := out.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("powercut: copy %s: %w", from, err)
	}
	return nil
}

// node is one file or directory of the mount: the loopback node, with
// every change recorded.
type node struct {
	fs.LoopbackNode
	p *FS
}

var (
	_ fs.NodeWriter         = (*node)(nil)
	_ fs.NodeWritever       = (*node)(nil)
	_ fs.NodeFsyncer        = (*node)(nil)
	_ fs.NodeCreater        = (*node)(nil)
	_ fs.NodeOpener         = (*node)(nil)
	_ fs.NodeOpendirHandler = (*node)(nil)
	_ fs.NodeMkdirer        = (*node)(nil)
	_ fs.NodeUnlinker       = (*node)(nil)
	_ fs.NodeRmdirer        = (*node)(nil)
	_ fs.NodeRenamer        = (*node)(nil)
	_ fs.NodeSetattrer      = (*node)(nil)
	_ fs.NodeAllocater      = (*node)(nil)
	_ fs.NodeCopyFileRanger = (*node)(nil)
	_ fs.NodeLinker         = (*node)(nil)
	_ fs.NodeSymlinker      = (*node)(nil)
	_ fs.NodeMknoder        = (*node)(nil)
)

// rel is the node's path below the root, "" for the root.
func (n *node) rel() string { return n.Path(n.Root()) }

func (n *node) child(name string) string { return path.Join(n.rel(), name) }

func (n *node) full(rel string) string { return filepath.Join(n.p.backing, filepath.FromSlash(rel)) }

func lstat(full string) (*syscall.Stat_t, error) {
	var st syscall.Stat_t
	if err := syscall.Lstat(full, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

func metaOf(st *syscall.Stat_t) meta {
	return meta{dir: st.Mode&syscall.S_IFMT == syscall.S_IFDIR, mode: st.Mode & 0o7777, uid: st.Uid, gid: st.Gid}
}

func (n *node) Write(ctx context.Context, f fs.FileHandle, data []byte, off int64) (uint32, syscall.Errno) {
	return n.Writev(ctx, f, [][]byte{data}, off)
}

func (n *node) Writev(ctx context.Context, f fs.FileHandle, data [][]byte, off int64) (uint32, syscall.Errno) {
	fw, ok := f.(fs.FileWriter)
	if !ok {
		return 0, syscall.EBADF
	}
	var buf []byte
	if len(data) == 1 {
		buf = data[0]
	} else {
		buf = slices.Concat(data...)
	}
	if n.p.isFrozen() {
		return 0, syscall.EIO
	}
	w, errno := fw.Write(ctx, buf, off)
	if errno != 0 {
		return w, errno
	}
	if errno := n.p.record(op{kind: opWrite, id: n.id(), off: off, data: slices.Clone(buf[:w])}); errno != 0 {
		return 0, errno
	}
	return w, 0
}

func (p *FS) isFrozen() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.frozen
}

// id is the node's id in the model.
func (n *node) id() uint64 {
	n.p.mu.Lock()
	defer n.p.mu.Unlock()
	return n.p.idOf(n.StableAttr().Ino)
}

func (n *node) Fsync(ctx context.Context, f fs.FileHandle, flags uint32) syscall.Errno {
	if n.IsDir() {
		return n.p.syncDir(n.rel())
	}
	var m *meta
	if st, err := lstat(n.full(n.rel())); err == nil {
		mm := metaOf(st)
		m = &mm
	}
	return n.p.syncFile(n.StableAttr().Ino, m)
}

func (n *node) Create(ctx context.Context, name string, flags uint32, mode uint32, out *fuse.EntryOut) (*fs.Inode, fs.FileHandle, uint32, syscall.Errno) {
	if n.p.isFrozen() {
		return nil, nil, 0, syscall.EIO
	}
	rel := n.child(name)
	_, existed := lstat(n.full(rel))
	ch, fh, fl, errno := n.LoopbackNode.Create(ctx, name, flags, mode, out)
	if errno != 0 {
		return ch, fh, fl, errno
	}
	ino := ch.StableAttr().Ino
	var o op
	if existed == nil {
		// O_CREAT on a file that is there: an open.
		if flags&syscall.O_TRUNC == 0 {
			return ch, wrap(fh), fl, 0
		}
		o = op{kind: opTrunc, id: n.p.lockedID(ino, false)}
	} else {
		st, err := lstat(n.full(rel))
		if err != nil {
			return nil, nil, 0, fs.ToErrno(err)
		}
		o = op{kind: opCreate, id: n.p.lockedID(ino, true), path: rel, meta: metaOf(st)}
	}
	if errno := n.p.record(o); errno != 0 {
		return nil, nil, 0, errno
	}
	return ch, wrap(fh), fl, 0
}

// lockedID returns ino's id; fresh gives it a new one (it was just made).
func (p *FS) lockedID(ino uint64, fresh bool) uint64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	if fresh {
		return p.newID(ino)
	}
	return p.idOf(ino)
}

func (n *node) Open(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	writes := flags&syscall.O_ACCMODE != syscall.O_RDONLY
	if writes && n.p.isFrozen() {
		return nil, 0, syscall.EIO
	}
	fh, fl, errno := n.LoopbackNode.Open(ctx, flags)
	if errno != 0 {
		return fh, fl, errno
	}
	if writes && flags&syscall.O_TRUNC != 0 {
		if errno := n.p.record(op{kind: opTrunc, id: n.id()}); errno != 0 {
			return nil, 0, errno
		}
	}
	return wrap(fh), fl, 0
}

// file is a loopback file that never asks the kernel for passthrough,
// which would send writes to the backing file behind the model's back.
type file struct{ *fs.LoopbackFile }

func (f *file) PassthroughFd() (int, bool) { return 0, false }

func wrap(fh fs.FileHandle) fs.FileHandle {
	if lf, ok := fh.(*fs.LoopbackFile); ok {
		return &file{lf}
	}
	return fh
}

// dirHandle is an open directory whose fsync goes to the model.
type dirHandle struct {
	fs.FileReaddirenter
	fs.FileSeekdirer
	fs.FileReleasedirer
	n *node
}

func (d *dirHandle) Fsyncdir(ctx context.Context, flags uint32) syscall.Errno {
	return d.n.p.syncDir(d.n.rel())
}

func (n *node) OpendirHandle(ctx context.Context, flags uint32) (fs.FileHandle, uint32, syscall.Errno) {
	fh, fl, errno := n.LoopbackNode.OpendirHandle(ctx, flags)
	if errno != 0 {
		return fh, fl, errno
	}
	d := &dirHandle{n: n}
	d.FileReaddirenter, _ = fh.(fs.FileReaddirenter)
	d.FileSeekdirer, _ = fh.(fs.FileSeekdirer)
	d.FileReleasedirer, _ = fh.(fs.FileReleasedirer)
	if d.FileReaddirenter == nil || d.FileSeekdirer == nil || d.FileReleasedirer == nil {
		return nil, 0, syscall.ENOTSUP
	}
	return d, fl, 0
}

func (n *node) Mkdir(ctx context.Context, name string, mode uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	if n.p.isFrozen() {
		return nil, syscall.EIO
	}
	ch, errno := n.LoopbackNode.Mkdir(ctx, name, mode, out)
	if errno != 0 {
		return ch, errno
	}
	rel := n.child(name)
	st, err := lstat(n.full(rel))
	if err != nil {
		return nil, fs.ToErrno(err)
	}
	if errno := n.p.record(op{kind: opCreate, id: n.p.lockedID(st.Ino, true), path: rel, meta: metaOf(st)}); errno != 0 {
		return nil, errno
	}
	return ch, 0
}

func (n *node) remove(name string, rm func() syscall.Errno) syscall.Errno {
	if n.p.isFrozen() {
		return syscall.EIO
	}
	rel := n.child(name)
	st, err := lstat(n.full(rel))
	if err != nil {
		return fs.ToErrno(err)
	}
	id := n.p.lockedID(st.Ino, false)
	if errno := rm(); errno != 0 {
		return errno
	}
	return n.p.record(op{kind: opRemove, id: id, path: rel})
}

func (n *node) Unlink(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, func() syscall.Errno { return n.LoopbackNode.Unlink(ctx, name) })
}

func (n *node) Rmdir(ctx context.Context, name string) syscall.Errno {
	return n.remove(name, func() syscall.Errno { return n.LoopbackNode.Rmdir(ctx, name) })
}

func (n *node) Rename(ctx context.Context, name string, newParent fs.InodeEmbedder, newName string, flags uint32) syscall.Errno {
	if n.p.isFrozen() {
		return syscall.EIO
	}
	np, ok := newParent.(*node)
	if !ok || flags&^uint32(1) != 0 { // RENAME_NOREPLACE only; RENAME_EXCHANGE is not modelled
		return syscall.EOPNOTSUPP
	}
	from, to := n.child(name), np.child(newName)
	st, err := lstat(n.full(from))
	if err != nil {
		return fs.ToErrno(err)
	}
	id := n.p.lockedID(st.Ino, false)
	if errno := n.LoopbackNode.Rename(ctx, name, newParent, newName, flags); errno != 0 {
		return errno
	}
	return n.p.record(op{kind: opRename, id: id, path: from, to: to, meta: metaOf(st)})
}

func (n *node) Setattr(ctx context.Context, f fs.FileHandle, in *fuse.SetAttrIn, out *fuse.AttrOut) syscall.Errno {
	if n.p.isFrozen() {
		return syscall.EIO
	}
	if errno := n.LoopbackNode.Setattr(ctx, f, in, out); errno != 0 {
		return errno
	}
	if sz, ok := in.GetSize(); ok {
		return n.p.record(op{kind: opTrunc, id: n.id(), size: int64(sz)})
	}
	return 0
}

func (n *node) Allocate(ctx context.Context, f fs.FileHandle, off, size uint64, mode uint32) syscall.Errno {
	return syscall.EOPNOTSUPP
}

func (n *node) CopyFileRange(ctx context.Context, fhIn fs.FileHandle, offIn uint64, out *fs.Inode, fhOut fs.FileHandle, offOut uint64, len uint64, flags uint64) (uint32, syscall.Errno) {
	return 0, syscall.EOPNOTSUPP // the kernel falls back to reads and writes
}

func (n *node) Link(ctx context.Context, target fs.InodeEmbedder, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *node) Symlink(ctx context.Context, target, name string, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}

func (n *node) Mknod(ctx context.Context, name string, mode, rdev uint32, out *fuse.EntryOut) (*fs.Inode, syscall.Errno) {
	return nil, syscall.EPERM
}
