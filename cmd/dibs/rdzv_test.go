package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/dibs-gpu/dibs/agent/agenttest"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/launch/launchtest"
)

// cmdlineSpy reads /proc/*/cmdline of every process over and over, as
// whoever runs it, until the file argv[2] appears, then writes every
// distinct command line it saw, with its owner's uid, to argv[1] (JSON).
// It says it is watching by creating argv[1].ready.
const cmdlineSpy = `
import json, os, sys
out, stop = sys.argv[1], sys.argv[2]
seen = set()
open(out + ".ready", "w").close()
while not os.path.exists(stop):
    for p in os.listdir("/proc"):
        if p.isdigit():
            try:
                uid = os.stat("/proc/" + p).st_uid
                with open("/proc/%s/cmdline" % p, "rb") as f:
                    seen.add((uid, f.read().replace(b"\0", b" ").decode("utf-8", "replace")))
            except OSError:
                pass
with open(out + ".tmp", "w") as f:
    json.dump(sorted(seen), f)
os.rename(out + ".tmp", out)
`

// rdzvWorker joins the run's process group the env:// way, sums its ranks
// over it (so the rendezvous worked), and writes what it was told to
// OUT/envRANK.json.
const rdzvWorker = `
import json, os, sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo")
t = torch.ones(1) * (dist.get_rank() + 1)
dist.all_reduce(t)
keys = ["DIBS_LEASE_TOKEN", "VIRTUAL_ENV", "PET_RDZV_ENDPOINT", "MASTER_ADDR", "MASTER_PORT"]
res = {k: os.environ.get(k, "") for k in keys}
res["rank"], res["sum"] = dist.get_rank(), float(t)
p = os.path.join(sys.argv[1], "env%d.json" % dist.get_rank())
with open(p + ".tmp", "w") as f:
    json.dump(res, f)
os.rename(p + ".tmp", p)
dist.barrier()
`

// rdzvResult is what rdzvWorker writes.
type rdzvResult struct {
	Token      string  `json:"DIBS_LEASE_TOKEN"`
	VirtualEnv string  `json:"VIRTUAL_ENV"`
	Endpoint   string  `json:"PET_RDZV_ENDPOINT"`
	MasterAddr string  `json:"MASTER_ADDR"`
	MasterPort string  `json:"MASTER_PORT"`
	Rank       int     `json:"rank"`
	Sum        float64 `json:"sum"`
}

// TestRunEnvironmentIsNotPublished is issue 31's first attack: another
// user on the node reads every process's command line while a --torchrun
// or --per-gpu run starts, to learn the rendezvous port and bind it before
// the job does. On the old code the port stood on tmux's argv (-e
// MASTER_PORT=N, kept for good by a tmux server the start launched) and on
// torchrun's (--rdzv_endpoint=127.0.0.1:N), beside DIBS_LEASE_TOKEN and the
// caller's carried environment. Now the spy sees none of them, while the
// job's processes still get every one (read from their real environment)
// and the rendezvous of the real torch 1.13 still forms.
func TestRunEnvironmentIsNotPublished(t *testing.T) {
	requireTorch(t)
	agenttest.RequireTmux(t)
	n := agenttest.Start(t, agenttest.Options{Sim: "2xL40S", Quiet: true})
	// A user of its own for each run, so its start also launches their tmux
	// server (whose command line is the first client's, for its life); all
	// made here, since a uid freed by one subtest's cleanup and given to
	// the next one's user is refused by the agent (it was someone else).
	users := map[string]launch.User{"--torchrun": launchtest.User(t), "--per-gpu": launchtest.User(t)}
	spy := launchtest.User(t)
	for _, flag := range []string{"--torchrun", "--per-gpu"} {
		t.Run(strings.TrimPrefix(flag, "--"), func(t *testing.T) {
			u := users[flag]
			marker := fmt.Sprintf("/nonexistent/dibs-carried-%016x", rand.Uint64())

			seenFile, stop := filepath.Join(spy.Home, flag[2:]+".json"), filepath.Join(spy.Home, flag[2:]+".stop")
			watch := exec.Command("/usr/bin/python3", "-c", cmdlineSpy, seenFile, stop)
			cred, err := launch.Credential(spy)
			if err != nil {
				t.Fatal(err)
			}
			watch.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
			watch.Dir = spy.Home
			if err := watch.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { watch.Process.Kill(); watch.Wait() })
			agenttest.Eventually(t, 20*time.Second, "the spy to watch", func() bool {
				_, err := os.Stat(seenFile + ".ready")
				return err == nil
			})

			out := filepath.Join(u.Home, "out")
			script := filepath.Join(u.Home, "worker.py")
			if err := os.Mkdir(out, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(script, []byte(rdzvWorker), 0o644); err != nil {
				t.Fatal(err)
			}
			os.Chown(out, u.UID, u.GID)
			o, errOut, code := dibsAsWith(t, u, []string{"PATH=/usr/bin:/bin", "VIRTUAL_ENV=" + marker}, n.Socket,
				"run", "-g", "2", "--for", "10m", "--json", flag, "--", "/usr/bin/python3", script, out)
			var sub api.Submitted
			if code != 0 || json.Unmarshal([]byte(o), &sub) != nil {
				t.Fatalf("dibs run %s: exit %d %q %q", flag, code, o, errOut)
			}
			cl := api.NewClient(n.Socket)
			agenttest.Eventually(t, 2*time.Minute, "the run to finish", func() bool {
				q, err := cl.Queue(context.Background())
				if err != nil {
					return false
				}
				for _, e := range q.Entries {
					if e.ID == sub.ID {
						return false
					}
				}
				return true
			})
			if err := os.WriteFile(stop, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			agenttest.Eventually(t, 20*time.Second, "the spy's report", func() bool {
				_, err := os.Stat(seenFile)
				return err == nil
			})

			// The job got everything, and its ranks met.
			var results []rdzvResult
			for rank := range 2 {
				var r rdzvResult
				b, err := os.ReadFile(filepath.Join(out, fmt.Sprintf("env%d.json", rank)))
				if err != nil || json.Unmarshal(b, &r) != nil {
					logs, _, _ := dibsAs(t, u, "/usr/bin:/bin", n.Socket, "logs", sub.ID)
					t.Fatalf("rank %d left no result (%v); the run's output:\n%s", rank, err, logs)
				}
				if r.Sum != 3 || r.Token == "" || r.VirtualEnv != marker {
					t.Errorf("rank %d: %+v; want the ranks' sum 3, a lease token, VIRTUAL_ENV %s", rank, r, marker)
				}
				results = append(results, r)
			}
			var port string
			switch flag {
			case "--torchrun":
				// torchrun's workers get a store of torchrun's; dibs's
				// rendezvous is the endpoint torchrun read.
				host, p, ok := strings.Cut(results[0].Endpoint, ":")
				if !ok || host != "127.0.0.1" || p == "" {
					t.Errorf("PET_RDZV_ENDPOINT = %q, want 127.0.0.1:PORT", results[0].Endpoint)
				}
				port = p
			case "--per-gpu":
				if results[0].MasterAddr != "127.0.0.1" || results[0].MasterPort == "" || results[1].MasterPort != results[0].MasterPort {
					t.Errorf("MASTER_ADDR:MASTER_PORT = %+v", results)
				}
				port = results[0].MasterPort
			}

			// The spy watched the whole run, and saw none of it. (Other
			// people's tests run on this machine too: the names are looked
			// for only in the job's user's processes, the values in all.)
			var seen [][2]any
			b, _ := os.ReadFile(seenFile)
			if err := json.Unmarshal(b, &seen); err != nil {
				t.Fatalf("the spy's report: %v", err)
			}
			sawJob, sawTmux := false, false
			for _, s := range seen {
				uid, _ := s[0].(float64)
				line, _ := s[1].(string)
				secrets := []string{marker}
				if port != "" {
					secrets = append(secrets, "127.0.0.1:"+port)
				}
				if int(uid) == u.UID {
					sawJob = sawJob || strings.Contains(line, script)
					sawTmux = sawTmux || strings.Contains(line, "tmux ")
					secrets = append(secrets, "MASTER_PORT", "rdzv_endpoint", "RDZV_ENDPOINT", "DIBS_LEASE_TOKEN", "VIRTUAL_ENV")
				}
				for _, secret := range secrets {
					if strings.Contains(line, secret) {
						t.Errorf("another user read %q in a command line of uid %d: %q", secret, int(uid), line)
					}
				}
			}
			if !sawJob || !sawTmux {
				t.Errorf("the spy saw the job %v, a tmux process %v of uid %d in %d command lines: it did not watch the run", sawJob, sawTmux, u.UID, len(seen))
			}
		})
	}
}
