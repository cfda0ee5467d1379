package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/lease"
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
as you, in a tmux session, with a fresh token. Once it listens, dibs prints the
ssh -L line to run on your laptop and the URL to open there. The lease ends when
the server ends, and the server ends when the lease does (extend it with
dibs extend). The server listens on 127.0.0.1 only: the tunnel is the way in.`,
		Example: `  dibs jupyter -g 1 --for 4h
  dibs jupyter -g 2 --note "attention maps"`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req, err := f.build(false)
			if err != nil {
				return err
			}
			if req.Count == 0 && len(req.GPUs) == 0 {
				req.Count = 1
			}
			return jupyter(c, req, port, host, f.json)
		},
	}
	f.add(c, cmd)
	cmd.Flags().IntVar(&port, "port", 0, "port to listen on (default: a free one)")
	cmd.Flags().StringVar(&host, "ssh-host", "", "the host your laptop ssh-es to for this node, in the printed tunnel (default: the node's name)")
	return cmd
}

// jupyterResult is what --json prints.
type jupyterResult struct {
	Lease   string `json:"lease"`
	Node    string `json:"node"`
	Session string `json:"session"`
	Port    int    `json:"port"`
	Token   string `json:"token"`
	URL     string `json:"url"`
	SSH     string `json:"ssh"`
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
	// It runs here: the jupyter found is this node's, and so is the port.
	if req.Node != "" && req.Node != b.Self {
		return fmt.Errorf("dibs jupyter starts the server on the node you run it on (%s): ssh to %s and run it there", safe(b.Self), safe(req.Node))
	}
	req.Node = b.Self
	if port == 0 {
		if port, err = freeLocalPort(); err != nil {
			return fmt.Errorf("find a free port: %w", err)
		}
	}
	tokenBytes := make([]byte, 24)
	rand.Read(tokenBytes)
	token := hex.EncodeToString(tokenBytes)
	name := "jupyter-" + token[:8]
	tokenFile, err := writeTokenFile(name, token)
	if err != nil {
		return err
	}
	defer os.Remove(tokenFile)
	wd, _ := os.Getwd()
	req.Run = &api.RunSpec{Name: name, Dir: wd, Command: []string{"/bin/sh", "-c", jupyterCommand(app, tokenFile, port)}, Env: lease.PickEnv(os.Environ())}
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
	if err := waitListening(ctx, cl, r.ID, port); err != nil {
		return err
	}
	if host == "" {
		host = r.Node
	}
	res := jupyterResult{Lease: r.ID, Node: r.Node, Session: r.Session, Port: port, Token: token,
		URL: fmt.Sprintf("http://127.0.0.1:%d%s?token=%s", port, app.page, token),
		SSH: fmt.Sprintf("ssh -N -L %d:127.0.0.1:%d %s", port, port, host)}
	if asJSON {
		return printJSON(c.stdout, res)
	}
	fmt.Fprintf(c.stdout, "%s runs on %s in tmux session %s (lease %s: GPU%s %s until %s).\n", app.name, safe(r.Node), safe(r.Session),
		safe(r.ID), plural(len(r.GPUs)), safe(r.CUDAVisibleDevices), r.ExpiresAt.Local().Format("Mon 15:04"))
	fmt.Fprintf(c.stdout, "On your laptop, open the tunnel:\n  %s\nthen open:\n  %s\n", safe(res.SSH), res.URL)
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

// jupyterCommand is the session's /bin/sh script (whatever the user's
// shell): the token comes from a file only the user can read, into the
// environment (JUPYTER_TOKEN), so it never shows in the process list; the
// file goes once read.
func jupyterCommand(app jupyterApp, tokenFile string, port int) string {
	q := make([]string, len(app.argv))
	for i, a := range app.argv {
		q[i] = shellQuoteArg(a)
	}
	return fmt.Sprintf(`JUPYTER_TOKEN="$(cat %s)"; rm -f %s; export JUPYTER_TOKEN; exec %s --no-browser --ip=127.0.0.1 --port=%d --port-retries=0`,
		shellQuoteArg(tokenFile), shellQuoteArg(tokenFile), strings.Join(q, " "), port)
}

func shellQuoteArg(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// writeTokenFile keeps the token where the session reads it, readable by
// the user alone.
func writeTokenFile(name, token string) (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("find your home directory for the token file: %w", err)
	}
	dir := filepath.Join(home, ".local", "state", "dibs", "jupyter")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", fmt.Errorf("make %s: %w", dir, err)
	}
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

func freeLocalPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// waitListening waits until something listens on 127.0.0.1:port, or the
// lease is gone (the server exited: its kept log says why).
func waitListening(ctx context.Context, cl *api.Client, id string, port int) error {
	deadline := time.Now().Add(jupyterStartWait)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for n := 0; ; n++ {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		if n%5 == 4 {
			bctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			b, err := cl.Board(bctx)
			cancel()
			if err == nil && !holds(b, id) {
				return fmt.Errorf("the server exited before it listened, so lease %s ended: `dibs logs %s` shows what it printed", id, id)
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the server did not listen on port %d within %s: `dibs logs %s` shows what it printed, `dibs attach %s` shows it live, `dibs release %s` gives up", port, lease.FormatDuration(jupyterStartWait), id, id, id)
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
