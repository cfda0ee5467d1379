package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/job"
)

// jupyterStartWait bounds how long `dibs jupyter` waits for the server to
// listen (a first start of JupyterLab builds its assets).
const jupyterStartWait = 90 * time.Second

// jupyterApp is the server to start and the path of its web page.
type jupyterApp struct {
	argv []string
	page string
	name string
}

// findJupyter looks for JupyterLab, then the classic notebook, in the
// caller's PATH: the session runs with a clean environment, so it gets the
// absolute path.
func findJupyter(lookPath func(string) (string, error)) (jupyterApp, error) {
	if p, err := lookPath("jupyter-lab"); err == nil {
		return jupyterApp{argv: []string{p}, page: "/lab", name: "JupyterLab"}, nil
	}
	if p, err := lookPath("jupyter-notebook"); err == nil {
		return jupyterApp{argv: []string{p}, page: "/tree", name: "Jupyter Notebook"}, nil
	}
	if p, err := lookPath("jupyter"); err == nil {
		return jupyterApp{argv: []string{p, "lab"}, page: "/lab", name: "JupyterLab"}, nil
	}
	return jupyterApp{}, errors.New("jupyter is not installed for you here (no jupyter-lab, jupyter-notebook or jupyter in your PATH): install it with `pip install --user jupyterlab` (or `conda install jupyterlab`), then run dibs jupyter again")
}

func jupyterCmd(c *cli) *cobra.Command {
	var f claimFlags
	var port int
	var host string
	cmd := &cobra.Command{
		Use:   "jupyter [-g N] [--for 4h]",
		Short: "Claim GPUs and start JupyterLab on them; print the ssh tunnel and the URL to open it from a laptop",
		Long: `Claim GPUs on this node and start JupyterLab (or the classic notebook) on them,
as you, in a tmux session, with a fresh token. Once it answers, dibs prints the
ssh -L line to run on your laptop and the URL to open there. The lease ends when
the server ends, and the server ends when the lease does (extend it with
dibs extend). The server listens on a unix socket in a directory only you can
enter (mode 0600, no TCP port on the node), so nobody else on the node can
reach it or stand in for it; ssh -L tunnels your laptop's port to that socket.
It needs a Jupyter that takes --sock: notebook 6.4 or later, jupyter_server 2.`,
		Example: `  dibs jupyter -g 1 --for 4h
  dibs jupyter -g 2 --note "attention maps" --port 9999`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := f.build(false)
			if err != nil {
				return err
			}
			if req.Count == 0 && len(req.GPUs) == 0 {
				req.Count = 1
			}
			if port < 1 || port > 65535 {
				return fmt.Errorf("--port %d: give the port your laptop opens, 1 to 65535 (default %d)", port, jupyterLaptopPort)
			}
			return jupyter(c, req, port, host, f.json)
		},
	}
	f.add(c, cmd)
	cmd.Flags().IntVar(&port, "port", jupyterLaptopPort, "the port on your laptop the tunnel opens (the server itself listens on a unix socket)")
	cmd.Flags().StringVar(&host, "ssh-host", "", "the host your laptop ssh-es to for this node, in the printed tunnel (default: the node's name)")
	return cmd
}

// jupyterLaptopPort is Jupyter's own default port, for the laptop's end of
// the tunnel.
const jupyterLaptopPort = 8888

// jupyterResult is what --json prints.
type jupyterResult struct {
	Lease   string `json:"lease"`
	Node    string `json:"node"`
	Session string `json:"session"`
	// Socket is the unix socket the server listens on, on the node.
	Socket string `json:"socket"`
	// Port is the laptop's end of the tunnel, which URL names.
	Port  int    `json:"port"`
	Token string `json:"token"`
	URL   string `json:"url"`
	SSH   string `json:"ssh"`
}

func jupyter(c *cli, req api.ClaimRequest, port int, host string, asJSON bool) error {
	app, err := findJupyter(exec.LookPath)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	cl := c.client()
	bctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	b, err := cl.Board(bctx)
	cancel()
	if err != nil {
		return err
	}
	// It runs here: the jupyter found is this node's, and so is the socket.
	if req.Node != "" && req.Node != b.Self {
		return fmt.Errorf("dibs jupyter starts the server on the node you run it on (%s): ssh to %s and run it there", safe(b.Self), safe(req.Node))
	}
	req.Node = b.Self
	dir, err := jupyterDir()
	if err != nil {
		return err
	}
	// The session's name and the token are drawn apart: the name is
	// public (the board, dibs events), the token is not.
	token := randomHex(24)
	name := "jupyter-" + randomHex(4)
	sock := filepath.Join(dir, name+".sock")
	if len(sock) > maxSocketPath {
		return fmt.Errorf("the socket path %s is longer than the %d bytes a unix socket may have: use a shorter home directory (HOME=...)", sock, maxSocketPath)
	}
	tokenFile, err := writeTokenFile(dir, name, token)
	if err != nil {
		return err
	}
	defer os.Remove(tokenFile)
	wd, _ := os.Getwd()
	req.Run = &api.RunSpec{Name: name, Dir: wd, Command: []string{"/bin/sh", "-c", jupyterCommand(app, tokenFile, sock)}, Env: job.PickEnv(os.Environ())}
	if req.Note == "" {
		req.Note = "jupyter"
	}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	r, err := cl.Claim(cctx, req)
	cancel()
	if err != nil {
		return err
	}
	if !asJSON {
		fmt.Fprintf(c.stderr, "starting %s on %s (lease %s, GPU%s %s)…\n", app.name, safe(r.Node), safe(r.ID), plural(len(r.GPUs)), safe(r.CUDAVisibleDevices))
	}
	if err := waitServing(ctx, cl, r.ID, sock, token); err != nil {
		return err
	}
	if host == "" {
		host = r.Node
	}
	res := jupyterResult{Lease: r.ID, Node: r.Node, Session: r.Session, Socket: sock, Port: port, Token: token,
		URL: fmt.Sprintf("http://127.0.0.1:%d%s?token=%s", port, app.page, token),
		SSH: fmt.Sprintf("ssh -N -L %d:%s %s", port, sock, host)}
	if asJSON {
		return printJSON(c.stdout, res)
	}
	fmt.Fprintf(c.stdout, "%s runs on %s in tmux session %s (lease %s: GPU%s %s until %s).\n", app.name, safe(r.Node), safe(r.Session),
		safe(r.ID), plural(len(r.GPUs)), safe(r.CUDAVisibleDevices), r.ExpiresAt.Local().Format("Mon 15:04"))
	fmt.Fprintf(c.stdout, "On your laptop, open the tunnel (to the server's socket, which only you can reach):\n  %s\nthen open:\n  %s\n", safe(res.SSH), res.URL)
	if r.CutBy != "" {
		// A booking of its GPUs begins at the end: extending would fail.
		fmt.Fprintf(c.stdout, "It stops at %s, cut short because booking %s of its GPUs begins then: save your work by then, or start it on other GPUs for longer; `dibs release %s` stops it now.\n",
			r.ExpiresAt.Local().Format("Mon 15:04"), safe(r.CutBy), safe(r.ID))
	} else {
		fmt.Fprintf(c.stdout, "It stops when the lease ends (`dibs extend %s --for 2h` keeps it); `dibs release %s` stops it now.\n", safe(r.ID), safe(r.ID))
	}
	if r.Borrowed {
		fmt.Fprintln(c.stdout, "note: the lease is borrowed (beyond your quota): it may be preempted when someone within theirs waits.")
	}
	return nil
}

// maxSocketPath is the longest path a unix socket may have on Linux (108
// bytes with the NUL), less a margin.
const maxSocketPath = 104

// jupyterCommand is the session's /bin/sh script (whatever the user's
// shell): the token comes from a file only the user can read, into the
// environment (JUPYTER_TOKEN), so it never shows in the process list; the
// file goes once read. The server listens on the unix socket sock, mode
// 0600, and on no TCP port.
func jupyterCommand(app jupyterApp, tokenFile, sock string) string {
	q := make([]string, len(app.argv))
	for i, a := range app.argv {
		q[i] = shellQuoteArg(a)
	}
	return fmt.Sprintf(`JUPYTER_TOKEN="$(cat %s)"; rm -f %s; export JUPYTER_TOKEN; exec %s --no-browser --sock=%s --sock-mode=0600`,
		shellQuoteArg(tokenFile), shellQuoteArg(tokenFile), strings.Join(q, " "), shellQuoteArg(sock))
}

func shellQuoteArg(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// jupyterDir is the caller's private directory for tokens and sockets,
// ~/.local/state/dibs/jupyter, made mode 0700 and checked to be theirs: a
// socket in it is out of every other user's reach.
func jupyterDir() (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find your home directory for the server's socket: %w", err)
	}
	dir := filepath.Join(home, ".local", "state", "dibs", "jupyter")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("make %s: %w", dir, err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		return "", fmt.Errorf("make %s private: %w", dir, err)
	}
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return "", fmt.Errorf("check %s: %w", dir, err)
	}
	if st.Mode&syscall.S_IFMT != syscall.S_IFDIR || int(st.Uid) != os.Getuid() {
		return "", fmt.Errorf("%s is not a directory of yours: remove it and run dibs jupyter again", dir)
	}
	return dir, nil
}

// writeTokenFile keeps the token where the session reads it, readable by
// the user alone.
func writeTokenFile(dir, name, token string) (string, error) {
	path := filepath.Join(dir, name+".token")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", fmt.Errorf("write the token file: %w", err)
	}
	defer f.Close()
	if _, err := f.WriteString(token); err != nil {
		return "", fmt.Errorf("write the token file: %w", err)
	}
	return path, nil
}

// ownSocket reports whether path is a unix socket of the caller's that
// nobody else may connect to.
func ownSocket(path string) bool {
	var st syscall.Stat_t
	if err := syscall.Lstat(path, &st); err != nil {
		return false
	}
	return st.Mode&syscall.S_IFMT == syscall.S_IFSOCK && int(st.Uid) == os.Getuid() && st.Mode&0o077 == 0
}

// answersWithToken asks the server on sock for its status with token: 200
// means it is the server started with that token. It speaks the one
// request by hand rather than link net/http into every dibs command
// (docs/benchmarks.md); the token is hex (randomHex), so it cannot break
// the header.
func answersWithToken(ctx context.Context, sock, token string) bool {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", sock)
	if err != nil {
		return false
	}
	defer conn.Close()
	deadline, _ := ctx.Deadline()
	conn.SetDeadline(deadline)
	req := "GET /api/status HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: token " + token + "\r\nConnection: close\r\n\r\n"
	if _, err := io.WriteString(conn, req); err != nil {
		return false
	}
	// The status line is all that is read: "HTTP/1.1 200 OK".
	line, err := bufio.NewReaderSize(io.LimitReader(conn, 512), 512).ReadString('\n')
	if err != nil {
		return false
	}
	proto, rest, _ := strings.Cut(line, " ")
	return strings.HasPrefix(proto, "HTTP/1.") && strings.HasPrefix(rest, "200 ")
}

// waitServing waits until the server answers with the token on its
// socket (a socket of the caller's, mode 0600), or the lease is gone (the
// server exited: its kept log says why).
func waitServing(ctx context.Context, cl *api.Client, id, sock, token string) error {
	deadline := time.Now().Add(jupyterStartWait)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		if ownSocket(sock) && answersWithToken(ctx, sock, token) {
			return nil
		}
		if n%5 == 4 {
			bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			b, err := cl.Board(bctx)
			cancel()
			if err == nil && !holds(b, id) {
				return fmt.Errorf("the server exited before it answered, so lease %s ended: `dibs logs %s` shows what it printed (dibs jupyter needs a Jupyter that takes --sock: notebook 6.4 or later, jupyter_server 2)", id, id)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server did not answer on %s within %s: `dibs logs %s` shows what it printed, `dibs attach %s` shows it live, `dibs release %s` gives up", sock, words.FormatDuration(jupyterStartWait), id, id, id)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("interrupted: lease %s and its server stay; `dibs release %s` stops them", id, id)
		case <-tick.C:
		}
	}
}

func holds(b api.Board, id string) bool {
	for _, n := range b.Nodes {
		for _, g := range n.GPUs {
			if g.Lease != nil && g.Lease.ID == id {
				return true
			}
		}
	}
	return false
}
