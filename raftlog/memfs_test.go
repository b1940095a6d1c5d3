package raftlog

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
)

// memFS is a journalFS in memory that models what a power cut keeps. Each
// file has the bytes the process sees (its page cache) and the bytes on
// the disk; SyncData copies what was written since the last sync to the
// disk. A directory's entries change at once for the process, and on the
// disk in the order they were made, all of them at SyncDir. Crash returns
// what a machine finds after a power cut now: every file as on disk, each
// sector written since the last sync kept or lost at random (torn
// writes), and a random prefix of each directory's changes since its last
// sync.
//
// Faults: hook runs before each operation and may block or fail it
// (ops "create", "open", "rename", "remove", "preallocate", "write",
// "sync", "syncdir", with the file's path); capacity, when set, bounds the
// bytes allocated to files, failing preallocation and writes past it with
// ENOSPC. A failed SyncData forgets what it did not write, as Linux does:
// the page cache keeps the bytes, the disk never gets them.
type memFS struct {
	mu       sync.Mutex
	files    map[string]*memFile // the process's view
	disk     map[string]*memFile // the disk's view
	pending  map[string][]dirOp  // directory changes not yet synced, by directory
	locks    map[string]bool
	capacity int64
	hook     func(op, name string) error
}

type memFile struct {
	cache, disk []byte
	alloc       int64
	dirty       map[int64]bool // sectors written since the last sync
}

// dirOp is a change to a directory: name now refers to f (nil: removed).
type dirOp struct {
	name string
	f    *memFile
}

func newMemFS() *memFS {
	return &memFS{files: map[string]*memFile{}, disk: map[string]*memFile{}, pending: map[string][]dirOp{}, locks: map[string]bool{}}
}

var _ journalFS = (*memFS)(nil)

func (m *memFS) call(op, name string) error {
	m.mu.Lock()
	h := m.hook
	m.mu.Unlock()
	if h != nil {
		return h(op, name)
	}
	return nil
}

// setHook replaces the hook.
func (m *memFS) setHook(h func(op, name string) error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hook = h
}

// setCapacity bounds the bytes allocated to files (0: no bound).
func (m *memFS) setCapacity(n int64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.capacity = n
}

// used returns the bytes allocated to the files the process sees.
func (m *memFS) used() int64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.usedLocked()
}

func (m *memFS) usedLocked() int64 {
	var n int64
	for _, f := range m.files {
		n += f.alloc
	}
	return n
}

func (m *memFS) changeLocked(name string, f *memFile) {
	if f == nil {
		delete(m.files, name)
	} else {
		m.files[name] = f
	}
	dir := filepath.Dir(name)
	m.pending[dir] = append(m.pending[dir], dirOp{name, f})
}

func applyOps(view map[string]*memFile, ops []dirOp) {
	for _, op := range ops {
		if op.f == nil {
			delete(view, op.name)
		} else {
			view[op.name] = op.f
		}
	}
}

func (m *memFS) Lock(dir string) (io.Closer, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.locks[dir] {
		return nil, fmt.Errorf("%s is held by this process", dir)
	}
	m.locks[dir] = true
	return closerFunc(func() error {
		m.mu.Lock()
		defer m.mu.Unlock()
		delete(m.locks, dir)
		return nil
	}), nil
}

type closerFunc func() error

func (c closerFunc) Close() error { return c() }

func (m *memFS) MkdirAll(string) error { return nil }

func (m *memFS) List(dir string) ([]string, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var names []string
	for name := range m.files {
		if filepath.Dir(name) == dir {
			names = append(names, filepath.Base(name))
		}
	}
	slices.Sort(names)
	return names, nil
}

func (m *memFS) Create(name string) (journalFile, error) {
	if err := m.call("create", name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	f := &memFile{dirty: map[int64]bool{}}
	m.changeLocked(name, f)
	return &memHandle{m: m, f: f, name: name}, nil
}

func (m *memFS) Open(name string) (journalFile, error) {
	if err := m.call("open", name); err != nil {
		return nil, err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[name]
	if f == nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return &memHandle{m: m, f: f, name: name}, nil
}

func (m *memFS) Rename(from, to string) error {
	if err := m.call("rename", to); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	f := m.files[from]
	if f == nil {
		return &fs.PathError{Op: "rename", Path: from, Err: fs.ErrNotExist}
	}
	m.changeLocked(from, nil)
	m.changeLocked(to, f)
	return nil
}

func (m *memFS) Remove(name string) error {
	if err := m.call("remove", name); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.files[name] == nil {
		return &fs.PathError{Op: "remove", Path: name, Err: fs.ErrNotExist}
	}
	m.changeLocked(name, nil)
	return nil
}

func (m *memFS) SyncDir(dir string) error {
	if err := m.call("syncdir", dir); err != nil {
		return err
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	applyOps(m.disk, m.pending[dir])
	delete(m.pending, dir)
	return nil
}

// crash returns the file system after a power cut now (see memFS). The
// hook and capacity are not carried over; locks are released.
func (m *memFS) crash(rng *rand.Rand) *memFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	view := map[string]*memFile{}
	for name, f := range m.disk {
		view[name] = f
	}
	dirs := make([]string, 0, len(m.pending))
	for dir := range m.pending {
		dirs = append(dirs, dir)
	}
	slices.Sort(dirs)
	for _, dir := range dirs {
		ops := m.pending[dir]
		applyOps(view, ops[:rng.IntN(len(ops)+1)])
	}
	c := newMemFS()
	copies := map[*memFile]*memFile{}
	names := make([]string, 0, len(view))
	for name := range view {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		f := view[name]
		if copies[f] == nil {
			copies[f] = f.afterCrash(rng)
		}
		c.files[name] = copies[f]
		c.disk[name] = copies[f]
	}
	return c
}

// afterCrash is the file as the disk holds it after a power cut: each
// sector written since the last sync has its new bytes or its old ones.
func (f *memFile) afterCrash(rng *rand.Rand) *memFile {
	data := slices.Clone(f.disk)
	sectors := make([]int64, 0, len(f.dirty))
	for s := range f.dirty {
		sectors = append(sectors, s)
	}
	slices.Sort(sectors)
	for _, s := range sectors {
		if rng.IntN(2) == 0 {
			continue
		}
		lo, hi := s*sectorSize, min((s+1)*sectorSize, int64(len(f.cache)))
		if int64(len(data)) < hi {
			data = append(data, make([]byte, hi-int64(len(data)))...)
		}
		copy(data[lo:hi], f.cache[lo:hi])
	}
	return &memFile{cache: data, disk: slices.Clone(data), alloc: max(f.alloc, int64(len(data))), dirty: map[int64]bool{}}
}

// reset puts the file system back to what its disk holds, as a power cut
// that tears nothing would: every unsynced byte and directory change is
// lost.
func (m *memFS) reset() *memFS {
	m.mu.Lock()
	defer m.mu.Unlock()
	c := newMemFS()
	copies := map[*memFile]*memFile{}
	for name, f := range m.disk {
		if copies[f] == nil {
			copies[f] = &memFile{cache: slices.Clone(f.disk), disk: slices.Clone(f.disk), alloc: f.alloc, dirty: map[int64]bool{}}
		}
		c.files[name], c.disk[name] = copies[f], copies[f]
	}
	return c
}

// segmentData returns the bytes the process sees of the journal segments
// in dir, by segment id.
func (m *memFS) segmentData(dir string) map[uint64][]byte {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := map[uint64][]byte{}
	for name, f := range m.files {
		base := filepath.Base(name)
		if filepath.Dir(name) != dir || !strings.HasSuffix(base, segmentSuffix) {
			continue
		}
		var id uint64
		if _, err := fmt.Sscanf(base, "%016x", &id); err == nil {
			out[id] = f.cache
		}
	}
	return out
}

// memHandle is an open memFile.
type memHandle struct {
	m    *memFS
	f    *memFile
	name string
}

func (h *memHandle) ReadAt(p []byte, off int64) (int, error) {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	if off >= int64(len(h.f.cache)) {
		return 0, io.EOF
	}
	n := copy(p, h.f.cache[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

func (h *memHandle) WriteAt(p []byte, off int64) (int, error) {
	if err := h.m.call("write", h.name); err != nil {
		return 0, err
	}
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	f := h.f
	if end := off + int64(len(p)); end > f.alloc {
		if c := h.m.capacity; c > 0 && h.m.usedLocked()+end-f.alloc > c {
			return 0, &fs.PathError{Op: "write", Path: h.name, Err: syscall.ENOSPC}
		}
		f.alloc = end
	}
	if end := off + int64(len(p)); end > int64(len(f.cache)) {
		f.cache = append(f.cache, make([]byte, end-int64(len(f.cache)))...)
	}
	copy(f.cache[off:], p)
	for s := off / sectorSize; s*sectorSize < off+int64(len(p)); s++ {
		f.dirty[s] = true
	}
	return len(p), nil
}

func (h *memHandle) Preallocate(size int64) error {
	if err := h.m.call("preallocate", h.name); err != nil {
		return err
	}
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	f := h.f
	if size > f.alloc {
		if c := h.m.capacity; c > 0 && h.m.usedLocked()+size-f.alloc > c {
			return &fs.PathError{Op: "fallocate", Path: h.name, Err: syscall.ENOSPC}
		}
		f.alloc = size
	}
	if size > int64(len(f.cache)) {
		f.cache = append(f.cache, make([]byte, size-int64(len(f.cache)))...)
	}
	return nil
}

func (h *memHandle) SyncData() error {
	err := h.m.call("sync", h.name)
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	f := h.f
	if err != nil {
		clear(f.dirty) // Linux marks the pages clean: they never reach the disk
		return err
	}
	if len(f.disk) < len(f.cache) {
		f.disk = append(f.disk, make([]byte, len(f.cache)-len(f.disk))...)
	}
	for s := range f.dirty {
		lo, hi := s*sectorSize, min((s+1)*sectorSize, int64(len(f.cache)))
		copy(f.disk[lo:hi], f.cache[lo:hi])
	}
	clear(f.dirty)
	return nil
}

func (h *memHandle) Size() (int64, error) {
	h.m.mu.Lock()
	defer h.m.mu.Unlock()
	return int64(len(h.f.cache)), nil
}

func (h *memHandle) Close() error { return nil }

// errInjected is the error hooks return.
var errInjected = errors.New("injected fault")
