package durable_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/dibs-gpu/dibs/base/durable"
	"github.com/dibs-gpu/dibs/nemesis/powercut"
)

// TestWriteFileSurvivesAPowerCut replaces a file and makes a directory on
// the power-cut file system, cuts, and finds both: os.WriteFile and a
// rename (what kept runs and doctor's samples did) lose both.
func TestWriteFileSurvivesAPowerCut(t *testing.T) {
	for _, torn := range []bool{false, true} {
		p := powercut.Mount(t, powercut.Options{Seed: 3})
		dir := filepath.Join(p.Dir(), "data", "sub")
		if err := durable.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, "state.json")
		if err := durable.WriteFile(path, []byte("v1"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := durable.WriteFile(path, []byte("v2"), 0o600); err != nil {
			t.Fatal(err)
		}
		// Unsynced noise after it, for the torn cut to keep a part of.
		os.WriteFile(path+".new", []byte("half-written"), 0o600)
		cut := p.Cut
		if torn {
			cut = p.CutTorn
		}
		if err := cut(); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(path)
		if err != nil || string(b) != "v2" {
			t.Errorf("torn=%v: after the cut %s holds %q (err %v), want v2", torn, path, b, err)
		}
		if fi, err := os.Stat(path); err == nil && fi.Mode().Perm() != 0o600 {
			t.Errorf("torn=%v: mode %v after the cut, want 0600", torn, fi.Mode().Perm())
		}
	}
}

// TestPlainRenameIsLostInAPowerCut is the model's side of the test above:
// what the agent did before durable.WriteFile does not survive.
func TestPlainRenameIsLostInAPowerCut(t *testing.T) {
	p := powercut.Mount(t, powercut.Options{})
	path := filepath.Join(p.Dir(), "kept-runs.json")
	os.WriteFile(path+".new", []byte("runs"), 0o600)
	if err := os.Rename(path+".new", path); err != nil {
		t.Fatal(err)
	}
	if err := p.Cut(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("a file written and renamed with no fsync is there after the cut (err %v): the model should lose it", err)
	}
}
