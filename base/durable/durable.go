// Package durable writes files so that a power cut leaves either the old
// content or the new, never an empty or missing file: the data is fsynced
// before the rename that publishes it, and the directory after it. Without
// the file's fsync a rename may publish an empty file (ext4's delayed
// allocation); without the directory's, a new name may be gone after the
// cut (docs/reliability.md, "Power cuts"). Standard library only, so every
// room that keeps a file can use it.
package durable

import (
	"fmt"
	"os"
	"path/filepath"
)

// WriteFile replaces path with data, durably: a temporary file beside it,
// written and fsynced, renamed over path, then the directory fsynced. A
// crash at any point leaves path as it was or as data.
func WriteFile(path string, data []byte, perm os.FileMode) error {
	tmp := path + ".new"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, perm)
	if err != nil {
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	_, err = f.Write(data)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(tmp)
		return fmt.Errorf("write %s: %w", tmp, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("replace %s: %w", path, err)
	}
	return SyncDir(filepath.Dir(path))
}

// SyncDir fsyncs a directory, which makes the names made, removed or
// renamed in it durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	err = d.Sync()
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("sync directory %s: %w", dir, err)
	}
	return nil
}

// MkdirAll is os.MkdirAll that makes each directory it creates durable:
// it fsyncs the parent of each, from the top down.
func MkdirAll(dir string, perm os.FileMode) error {
	dir = filepath.Clean(dir)
	var made []string
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(d); err == nil {
			break
		}
		made = append(made, d)
		if filepath.Dir(d) == d {
			break
		}
	}
	if err := os.MkdirAll(dir, perm); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	for i := len(made) - 1; i >= 0; i-- {
		if err := SyncDir(filepath.Dir(made[i])); err != nil {
			return err
		}
	}
	return nil
}
