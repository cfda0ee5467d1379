package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"sync"
	"testing"

	"github.com/dibs-gpu/dibs/api"
)

// fakeLogs serves /v1/logs/read from files held in memory, as an agent
// reads a kept log: the current file and the one rotated out (".1").
type fakeLogs struct {
	mu    sync.Mutex
	files map[string]fakeFile // part → file
}

type fakeFile struct {
	data  []byte
	inode uint64
}

func (f *fakeLogs) set(part, data string, inode uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.files[part] = fakeFile{data: []byte(data), inode: inode}
}

func (f *fakeLogs) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var req api.LogReadRequest
	json.NewDecoder(r.Body).Decode(&req)
	f.mu.Lock()
	file, ok := f.files[req.Part]
	f.mu.Unlock()
	if !ok {
		w.WriteHeader(http.StatusNotFound)
		json.NewEncoder(w).Encode(api.ErrorBody{Error: "no such log", Code: "not_found"})
		return
	}
	off := min(int(req.Offset), len(file.data))
	end := min(off+max(req.Max, 1), len(file.data))
	json.NewEncoder(w).Encode(api.LogChunk{Data: file.data[off:end], Size: int64(len(file.data)), Inode: file.inode})
}

// TestFollowerReadsARotatedLogWhole: a log that rotates between two reads
// loses nothing: the rest of the old file (now ".1") comes first, then
// the new one from its start; a follower resumed at a saved position in
// the old file does the same.
func TestFollowerReadsARotatedLogWhole(t *testing.T) {
	t.Setenv("XDG_STATE_HOME", t.TempDir())
	sock := filepath.Join(t.TempDir(), "dibs.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	logs := &fakeLogs{files: map[string]fakeFile{}}
	srv := &http.Server{Handler: logs}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	cl := api.NewClient(sock)
	src := []api.LogSource{{Node: "n1", Session: "s", Lease: "n1-1", Rank: 0, Running: true}}
	ctx := context.Background()

	var out bytes.Buffer
	f := newFollower(cl, &out, "n1-q1", false)
	f.update(src)
	logs.set("", "a\nb\n", 1)
	f.pump(ctx)
	logs.set(".1", "a\nb\nc\n", 1)
	logs.set("", "d\n", 2)
	f.pump(ctx)
	if got, want := out.String(), "a\nb\nc\nd\n"; got != want {
		t.Errorf("followed %q, want %q", got, want)
	}

	// Resumed from where the first follower stopped (after d, in the file
	// that has since grown and rotated): e, then the new file.
	logs.set(".1", "d\ne\n", 2)
	logs.set("", "f\n", 3)
	var again bytes.Buffer
	g := newFollower(cl, &again, "n1-q1", false)
	if err := g.resume(); err != nil {
		t.Fatal(err)
	}
	g.update(src)
	g.pump(ctx)
	if got, want := again.String(), "e\nf\n"; got != want {
		t.Errorf("resumed %q, want %q", got, want)
	}
}
