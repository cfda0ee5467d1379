package main

import (
	"encoding/json"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/dibs-gpu/dibs/api"
)

// serveAttach runs a minimal agent on sock whose every attach answer is argv.
func serveAttach(t *testing.T, sock string, argv []string) {
	t.Helper()
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/attach", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(api.AttachResponse{Local: true, Command: argv})
	})
	mux.HandleFunc("/v1/status", func(w http.ResponseWriter, _ *http.Request) {
		json.NewEncoder(w).Encode(api.Status{Node: "fake"})
	})
	srv := &http.Server{Handler: mux}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
}

// `dibs attach` runs only tmux attach or ssh to it: an agent that sends
// anything else gets a refusal that shows the command, and nothing runs.
func TestCLIAttachRunsOnlyTmuxOrSSH(t *testing.T) {
	dir := t.TempDir()
	// Each case's command would create its own marker.
	marker := func(i int) string { return filepath.Join(dir, "pwned"+strconv.Itoa(i)) }
	tests := []struct {
		name   string
		argv   []string
		quoted string
	}{
		{"a shell", []string{"sh", "-c", "touch " + marker(0)}, "sh -c 'touch " + marker(0) + "'"},
		{"ssh with a ProxyCommand", []string{"ssh", "-oProxyCommand=touch " + marker(1), "node02"}, "ssh '-oProxyCommand=touch " + marker(1) + "' node02"},
		{"ssh -t with a ProxyCommand", []string{"ssh", "-t", "-oProxyCommand=touch " + marker(2), "node02", "tmux", "attach-session", "-t", "=x"}, "ssh -t '-oProxyCommand=touch " + marker(2) + "' node02 tmux attach-session -t =x"},
	}
	for i, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			sock := filepath.Join(dir, "agent"+strconv.Itoa(i)+".sock")
			serveAttach(t, sock, tc.argv)
			out, errOut, code := dibs(t, sock, nil, "attach")
			if code == 0 {
				t.Fatalf("exit 0, want a refusal; stdout %q", out)
			}
			want := "dibs: refusing to run the attach command the agent sent, which is not `tmux attach-session` or `ssh -t HOST tmux attach-session`: " + tc.quoted + " (nothing was run;"
			if !strings.HasPrefix(errOut, want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
				t.Errorf("stderr:\n%s\nwant one line starting:\n%s", errOut, want)
			}
			if _, err := os.Stat(marker(i)); err == nil {
				t.Errorf("the agent's command ran: %s exists", marker(i))
			}
		})
	}
}

// --socket and DIBS_SOCKET say where the agent is, not whom to trust: a
// socket in a directory others can write is refused either way.
func TestCLIRefusesSocketOthersCanWrite(t *testing.T) {
	ww := filepath.Join(t.TempDir(), "shared")
	if err := os.Mkdir(ww, 0o700); err != nil {
		t.Fatal(err)
	}
	os.Chmod(ww, 0o777)
	sock := filepath.Join(ww, "dibs.sock")
	serveAttach(t, sock, nil)
	want := "dibs: refusing the dibs socket " + sock + ": its directory " + ww + " is writable by group or others (drwxrwxrwx)"

	_, errOut, code := dibs(t, sock, nil, "status")
	if code == 0 || !strings.HasPrefix(errOut, want) || strings.Count(strings.TrimSpace(errOut), "\n") != 0 {
		t.Errorf("--socket: exit %d, stderr:\n%s\nwant one line starting:\n%s", code, errOut, want)
	}

	cmd := exec.Command(dibsBin, "status")
	cmd.Env = append(os.Environ(), "DIBS_SOCKET="+sock)
	b, err := cmd.CombinedOutput()
	if err == nil || !strings.HasPrefix(string(b), want) {
		t.Errorf("DIBS_SOCKET: %v, output:\n%s\nwant it to start:\n%s", err, b, want)
	}
}
