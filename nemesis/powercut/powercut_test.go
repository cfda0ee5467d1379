package powercut_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"go.etcd.io/bbolt"

	"github.com/dibs-gpu/dibs/nemesis/powercut"
)

// put writes name whole, fsyncs it when sync, and fsyncs its directory
// when syncDir.
func put(t *testing.T, p *powercut.FS, name, content string, sync, syncDir bool) {
	t.Helper()
	f, err := os.OpenFile(filepath.Join(p.Dir(), name), os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteString(content); err != nil {
		t.Fatal(err)
	}
	if sync {
		if err := f.Sync(); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	if syncDir {
		dirSync(t, filepath.Dir(filepath.Join(p.Dir(), name)))
	}
}

func dirSync(t *testing.T, dir string) {
	t.Helper()
	d, err := os.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		t.Fatalf("fsync directory %s: %v", dir, err)
	}
}

// read returns name's content, or "<none>" when it is not there.
func read(t *testing.T, p *powercut.FS, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(p.Dir(), name))
	if errors.Is(err, os.ErrNotExist) {
		return "<none>"
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func cut(t *testing.T, p *powercut.FS) {
	t.Helper()
	if err := p.Cut(); err != nil {
		t.Fatalf("cut: %v", err)
	}
}

func TestWriteWithoutFsyncIsGoneAfterACut(t *testing.T) {
	p := powercut.Mount(t, powercut.Options{})
	put(t, p, "a", "synced", true, true)
	put(t, p, "a", "not synced", false, false)
	put(t, p, "new", "synced, but its directory never was", true, false)
	if got := read(t, p, "a"); got != "not synced" {
		t.Fatalf("before the cut a = %q, want what was written", got)
	}
	cut(t, p)
	if got, want := read(t, p, "a"), "synced"; got != want {
		t.Errorf("after the cut a = %q, want %q (the last synced content)", got, want)
	}
	if got := read(t, p, "new"); got != "<none>" {
		t.Errorf("after the cut a new file whose directory was never synced holds %q, want it gone", got)
	}
	if s := p.Stats(); s.Cuts != 1 || s.Dropped == 0 {
		t.Errorf("stats %+v: want 1 cut that dropped something", s)
	}
}

func TestFsyncedWriteStays(t *testing.T) {
	p := powercut.Mount(t, powercut.Options{})
	if err := os.Mkdir(filepath.Join(p.Dir(), "d"), 0o700); err != nil {
		t.Fatal(err)
	}
	dirSync(t, p.Dir())
	put(t, p, "d/f", "kept", true, true)
	put(t, p, "empty", "data never synced", false, true)
	cut(t, p)
	if got, want := read(t, p, "d/f"), "kept"; got != want {
		t.Errorf("after the cut d/f = %q, want %q", got, want)
	}
	fi, err := os.Stat(filepath.Join(p.Dir(), "d"))
	if err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("after the cut d is %v (err %v), want a directory of mode 0700", fi, err)
	}
	// Its name was synced, its data was not: ext4's zero-length file.
	if got := read(t, p, "empty"); got != "" {
		t.Errorf("after the cut a file whose name was synced but not its data holds %q, want it empty", got)
	}
	// Twice: a cut of a mount that came from a cut.
	put(t, p, "d/f", "kept again", true, false)
	cut(t, p)
	if got, want := read(t, p, "d/f"), "kept again"; got != want {
		t.Errorf("after the second cut d/f = %q, want %q", got, want)
	}
}

// TestRenameIsDurableOnlyWithItsDirectorysFsync holds the model's answer to
// a rename without the directory's fsync: it is lost (the old name keeps
// its old content), as ext4 with default options may lose it.
func TestRenameIsDurableOnlyWithItsDirectorysFsync(t *testing.T) {
	p := powercut.Mount(t, powercut.Options{})
	put(t, p, "state", "v1", true, true)

	put(t, p, "state.new", "v2", true, false)
	if err := os.Rename(filepath.Join(p.Dir(), "state.new"), filepath.Join(p.Dir(), "state")); err != nil {
		t.Fatal(err)
	}
	cut(t, p)
	if got, want := read(t, p, "state"), "v1"; got != want {
		t.Errorf("a rename without the directory's fsync: state = %q after the cut, want %q", got, want)
	}
	if got := read(t, p, "state.new"); got != "<none>" {
		t.Errorf("a rename without the directory's fsync: state.new = %q after the cut, want none (its creation was never synced either)", got)
	}

	put(t, p, "state.new", "v3", true, false)
	if err := os.Rename(filepath.Join(p.Dir(), "state.new"), filepath.Join(p.Dir(), "state")); err != nil {
		t.Fatal(err)
	}
	dirSync(t, p.Dir())
	cut(t, p)
	if got, want := read(t, p, "state"), "v3"; got != want {
		t.Errorf("a rename followed by the directory's fsync: state = %q after the cut, want %q", got, want)
	}

	// The rename synced, the data not: the file arrives empty.
	put(t, p, "state.new", "v4", false, false)
	if err := os.Rename(filepath.Join(p.Dir(), "state.new"), filepath.Join(p.Dir(), "state")); err != nil {
		t.Fatal(err)
	}
	dirSync(t, p.Dir())
	cut(t, p)
	if got := read(t, p, "state"); got != "" {
		t.Errorf("a synced rename of a file whose data was never synced: state = %q after the cut, want it empty", got)
	}
}

func TestTornCutKeepsAPrefix(t *testing.T) {
	p := powercut.Mount(t, powercut.Options{Seed: 5})
	put(t, p, "log", "", true, true)
	var want bytes.Buffer
	lengths := map[int]bool{}
	for round := 0; round < 12; round++ {
		f, err := os.OpenFile(filepath.Join(p.Dir(), "log"), os.O_WRONLY|os.O_APPEND, 0)
		if err != nil {
			t.Fatal(err)
		}
		base := want.Len()
		for i := 0; i < 20; i++ {
			line := bytes.Repeat([]byte{byte('a' + i)}, 100)
			f.Write(line)
			want.Write(line)
		}
		f.Close()
		if err := p.CutTorn(); err != nil {
			t.Fatal(err)
		}
		got := read(t, p, "log")
		if len(got) < base || !bytes.HasPrefix(want.Bytes(), []byte(got)) {
			t.Fatalf("round %d: after a torn cut the log is %d bytes that are not a prefix of the %d written (%d synced)", round, len(got), want.Len(), base)
		}
		lengths[len(got)-base] = true
		want.Truncate(len(got))
		// What the torn cut kept is durable now.
		f, _ = os.OpenFile(filepath.Join(p.Dir(), "log"), os.O_WRONLY, 0)
		f.Sync()
		f.Close()
	}
	torn := 0
	for n := range lengths {
		if n > 0 && n < 2000 {
			torn++
		}
	}
	if torn < 2 {
		t.Errorf("torn cuts kept %v bytes of 2000 unsynced: want several strictly between none and all", lengths)
	}
	if s := p.Stats(); s.TornCuts != 12 {
		t.Errorf("stats %+v: want 12 torn cuts", s)
	}
}

// TestCutDropsWhatThePageCacheHeld reads an unsynced write through mmap
// (so the kernel caches its page) and checks that the cut's fresh mount
// does not serve that page again. The mmap is done by a child process:
// never in the one serving the mount (see the package doc).
func TestCutDropsWhatThePageCacheHeld(t *testing.T) {
	p := powercut.Mount(t, powercut.Options{})
	put(t, p, "m", "old-old-old", true, true)
	put(t, p, "m", "new-new-new", false, false)
	file := filepath.Join(p.Dir(), "m")
	if got := child(t, "mmap", file); got != "new-new-new" {
		t.Fatalf("before the cut mmap reads %q", got)
	}
	cut(t, p)
	if got, want := child(t, "mmap", file), "old-old-old"; got != want {
		t.Errorf("after the cut mmap reads %q, want %q: the page cache outlived the cut", got, want)
	}
}

func TestFrozenRefusesWritesAndSyncs(t *testing.T) {
	p := powercut.Mount(t, powercut.Options{})
	f, err := os.Create(filepath.Join(p.Dir(), "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	p.Freeze()
	if _, err := f.WriteString("x"); !errors.Is(err, syscall.EIO) {
		t.Errorf("a write after the power went out: %v, want EIO", err)
	}
	if err := f.Sync(); !errors.Is(err, syscall.EIO) {
		t.Errorf("an fsync after the power went out: %v, want EIO", err)
	}
}

// TestBboltKeepsCommittedTransactionsOnly has a child process open a bbolt
// file on the mount (syncing the directory once it is created, which bbolt
// itself does not do), commit a transaction, commit one without fsync
// (NoSync), leave one open and wait; the power goes out under it.
func TestBboltKeepsCommittedTransactionsOnly(t *testing.T) {
	p := powercut.Mount(t, powercut.Options{})
	path := filepath.Join(p.Dir(), "b.db")
	cutUnder(t, p, "bbolt-write", path, "sync-dir")
	if got, want := child(t, "bbolt-read", path), "committed=1"; got != want {
		t.Errorf("after the cut the bucket holds %q, want only %q (the NoSync commit and the open transaction lost)", got, want)
	}

	// bbolt alone does not sync the directory of a new file: without it
	// the whole file is gone after a cut.
	cutUnder(t, p, "bbolt-write", filepath.Join(p.Dir(), "new.db"), "")
	if got := read(t, p, "new.db"); got != "<none>" {
		t.Errorf("a new bbolt file whose directory was never synced is there after the cut (%d bytes), want it gone", len(got))
	}
}

// cutUnder starts a child doing what, waits for it to say "ready", cuts
// the power under it and kills it.
func cutUnder(t *testing.T, p *powercut.FS, what string, args ...string) {
	t.Helper()
	cmd := childCmd(what, args...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child %s: %q, %v", what, line, err)
	}
	p.Freeze()
	cmd.Process.Kill()
	cmd.Wait()
	cut(t, p)
}

func childCmd(what string, args ...string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "POWERCUT_CHILD="+what, "POWERCUT_ARGS="+strings.Join(args, "\n"))
	return cmd
}

// child runs a child process doing what and returns its output.
func child(t *testing.T, what string, args ...string) string {
	t.Helper()
	cmd := childCmd(what, args...)
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("child %s: %v", what, err)
	}
	return string(out)
}

func TestMain(m *testing.M) {
	if what := os.Getenv("POWERCUT_CHILD"); what != "" {
		if err := runChild(what, strings.Split(os.Getenv("POWERCUT_ARGS"), "\n")); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// runChild is the child's side: what it does to the mount.
func runChild(what string, args []string) error {
	switch what {
	case "mmap":
		f, err := os.Open(args[0])
		if err != nil {
			return err
		}
		b, err := syscall.Mmap(int(f.Fd()), 0, 11, syscall.PROT_READ, syscall.MAP_SHARED)
		if err != nil {
			return err
		}
		fmt.Print(string(b))
		return nil
	case "bbolt-write":
		db, err := bbolt.Open(args[0], 0o600, nil)
		if err != nil {
			return err
		}
		if len(args) > 1 && args[1] == "sync-dir" {
			d, err := os.Open(filepath.Dir(args[0]))
			if err != nil {
				return err
			}
			if err := d.Sync(); err != nil {
				return err
			}
		}
		set := func(k, v string) error {
			return db.Update(func(tx *bbolt.Tx) error {
				b, err := tx.CreateBucketIfNotExists([]byte("b"))
				if err != nil {
					return err
				}
				return b.Put([]byte(k), []byte(v))
			})
		}
		if err := set("committed", "1"); err != nil {
			return err
		}
		db.NoSync = true
		if err := set("unsynced", "2"); err != nil {
			return err
		}
		db.NoSync = false
		tx, err := db.Begin(true)
		if err != nil {
			return err
		}
		b, _ := tx.CreateBucketIfNotExists([]byte("b"))
		b.Put([]byte("open"), []byte("3"))
		fmt.Println("ready")
		select {} // the power goes out here
	case "bbolt-read":
		db, err := bbolt.Open(args[0], 0o600, &bbolt.Options{ReadOnly: true})
		if err != nil {
			return fmt.Errorf("bbolt after the cut: %w", err)
		}
		defer db.Close()
		var kv []string
		err = db.View(func(tx *bbolt.Tx) error {
			if b := tx.Bucket([]byte("b")); b != nil {
				return b.ForEach(func(k, v []byte) error { kv = append(kv, string(k)+"="+string(v)); return nil })
			}
			return nil
		})
		fmt.Print(strings.Join(kv, ","))
		return err
	}
	return fmt.Errorf("no such child: %s", what)
}
