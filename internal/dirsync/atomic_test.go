package dirsync

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"testing"
)

// On the real disk: the new content replaces the old, with the
// permissions asked for, and no temporary file is left.
func TestWriteFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "keyring")
	if err := os.WriteFile(path, []byte("old"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(path)
	if err != nil || string(got) != "new" {
		t.Fatalf("read back %q, %v; want new", got, err)
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v, want 0600", st.Mode().Perm())
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 1 {
		t.Fatalf("%d entries in the directory, want the file alone", len(ents))
	}
	// A directory that is not there: an error naming the path, nothing written.
	missing := filepath.Join(dir, "missing", "keyring")
	if err := WriteFile(missing, []byte("x"), 0o600); err == nil || !bytes.Contains([]byte(err.Error()), []byte(missing)) {
		t.Fatalf("WriteFile into a missing directory: %v", err)
	}
}

// After every step of WriteFile a crash leaves the old content or the new
// one, whole; once WriteFile returns the new content survives a crash. The
// disk is modelled: a file's bytes survive once the file is synced, a
// directory's entries (a create, a rename) once the directory is. Without
// the directory's sync the last check fails: the rename is lost.
func TestWriteFileSurvivesACrashAtEveryStep(t *testing.T) {
	const path = "/d/keyring"
	fsys := newCrashFS(path, "old")
	if err := writeFile(fsys, path, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	for i, seen := range fsys.afterCrash {
		if seen != "old" && seen != "new" {
			t.Fatalf("a crash after step %d (%s) leaves %q", i+1, fsys.steps[i], seen)
		}
	}
	if last := fsys.afterCrash[len(fsys.afterCrash)-1]; last != "new" {
		t.Fatalf("a crash after WriteFile returned leaves %q, want new (steps %v)", last, fsys.steps)
	}
	if n := len(fsys.live); n != 1 {
		t.Fatalf("%d files left, want the keyring alone: %v", n, fsys.steps)
	}
}

// A failed write leaves the old file and no temporary one.
func TestWriteFileFailureLeavesTheOld(t *testing.T) {
	const path = "/d/keyring"
	fsys := newCrashFS(path, "old")
	fsys.failSync = true
	if err := writeFile(fsys, path, []byte("new"), 0o600); err == nil {
		t.Fatal("WriteFile with a failing sync succeeded")
	}
	if len(fsys.live) != 1 || string(fsys.live[path].data) != "old" {
		t.Fatalf("after the failure: %d files, the keyring holds %q", len(fsys.live), fsys.live[path].data)
	}
}

// crashFS is a disk with a page cache: live is what the process sees,
// durable the directory entries a crash keeps; an inode's synced bytes are
// what a crash keeps of it. After each step it records what a crash then
// would leave at the watched path.
type crashFS struct {
	watch         string
	live, durable map[string]*inode
	steps         []string
	afterCrash    []string
	failSync      bool
	temps         int
}

type inode struct{ data, synced []byte }

func newCrashFS(path, content string) *crashFS {
	ino := &inode{data: []byte(content), synced: []byte(content)}
	return &crashFS{watch: path, live: map[string]*inode{path: ino}, durable: map[string]*inode{path: ino}}
}

func (c *crashFS) step(format string, args ...any) {
	c.steps = append(c.steps, fmt.Sprintf(format, args...))
	seen := "<none>"
	if ino := c.durable[c.watch]; ino != nil {
		seen = string(ino.synced)
	}
	c.afterCrash = append(c.afterCrash, seen)
}

func (c *crashFS) CreateTemp(dir, pattern string) (file, error) {
	c.temps++
	name := filepath.Join(dir, fmt.Sprintf("tmp%d", c.temps))
	ino := &inode{}
	c.live[name] = ino
	c.step("create %s", name)
	return &crashFile{c: c, name: name, ino: ino}, nil
}

func (c *crashFS) Rename(from, to string) error {
	ino, ok := c.live[from]
	if !ok {
		return os.ErrNotExist
	}
	c.live[to] = ino
	delete(c.live, from)
	c.step("rename %s %s", from, to)
	return nil
}

func (c *crashFS) Remove(path string) error {
	delete(c.live, path)
	c.step("remove %s", path)
	return nil
}

func (c *crashFS) SyncDir(string) error {
	c.durable = maps.Clone(c.live)
	c.step("sync dir")
	return nil
}

type crashFile struct {
	c    *crashFS
	name string
	ino  *inode
}

func (f *crashFile) Name() string { return f.name }
func (f *crashFile) Write(b []byte) (int, error) {
	f.ino.data = append(f.ino.data, b...)
	f.c.step("write %s", f.name)
	return len(b), nil
}
func (f *crashFile) Chmod(os.FileMode) error { return nil }
func (f *crashFile) Sync() error {
	if f.c.failSync {
		return errors.New("injected: fsync failed")
	}
	f.ino.synced = bytes.Clone(f.ino.data)
	f.c.step("sync %s", f.name)
	return nil
}
func (f *crashFile) Close() error { return nil }
