package daemoncmd

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/agent/config"
	"github.com/dibs-gpu/dibs/api"
	"github.com/dibs-gpu/dibs/base/words"
	"github.com/dibs-gpu/dibs/launch"
	"github.com/dibs-gpu/dibs/lease"
	"github.com/dibs-gpu/dibs/nodeprobe"
	"github.com/dibs-gpu/dibs/nodeprobe/nvml"
	"github.com/dibs-gpu/dibs/nodeprobe/probe"
)

// agentFlags are the flags of `dibs agent`; the config file fills what they leave.
type agentFlags struct {
	config        string
	nodeName      string
	dataDir       string
	probeInterval time.Duration
	backend       string
	sim           string
	simLoad       string
	bind          string
	advertise     string
	join          []string
	clusterName   string
	keyFile       string
	insecure      bool
	sshListen     string
	sshUsers      string
	logFormat     string
	metricsListen string
}

func agentCmd(c *cli) *cobra.Command {
	var f agentFlags
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the node daemon that holds this node's GPU leases",
		Long: `Run the dibs agent: it probes this node's GPUs, keeps the lease table in a
bbolt file, and serves the local API on a unix socket. Run it as root (systemd)
so it can start tmux sessions as the people who claim; run without root it
serves only its own user.

Without GPUs, try it on simulated ones:
  dibs agent --sim 4xH100-80GB`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, deps, err := c.agentConfig(cmd, f)
			if err != nil {
				// A distinct status, so systemd does not restart an agent
				// that cannot start until someone edits a file
				// (RestartPreventExitStatus in packaging/dibs.service).
				return &exitError{code: ExitConfig, msg: err.Error()}
			}
			a, err := agent.New(cfg, deps)
			if err != nil {
				return err
			}
			ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
			defer stop()
			if err := a.Start(ctx); err != nil {
				return err
			}
			// SIGTERM (systemctl restart and stop, an upgrade) is a
			// restart: the cluster keeps this node's work for the grace.
			// Leaving for good is said with `dibs leave`.
			select {
			case <-ctx.Done():
				cfg.Log.Info("stopping (restarting: the others keep this node's work for the grace; `dibs leave` leaves for good)")
				return a.Stop()
			case <-a.LeaveRequested():
				cfg.Log.Info("leaving the cluster for good")
				return a.Leave()
			}
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.config, "config", "", "config file (default "+config.DefaultConfigFile+" when it exists)")
	fl.StringVar(&f.nodeName, "node-name", "", "this node's name in the cluster (default: hostname)")
	fl.StringVar(&f.dataDir, "data-dir", "", "where the lease store lives (default /var/lib/dibs as root, else $XDG_STATE_HOME/dibs)")
	fl.DurationVar(&f.probeInterval, "probe-interval", 0, "how often to read the GPUs (default 1s)")
	fl.StringVar(&f.backend, "backend", "", "GPU backend: auto, nvml, nvidia-smi or sim (default auto)")
	fl.StringVar(&f.sim, "sim", "", "simulate GPUs instead of probing, e.g. 8xH100-80GB or 4xRTX-PRO-6000,2xL40S")
	fl.StringVar(&f.simLoad, "sim-load", "", "JSON file of simulated load, re-read at every probe")
	fl.StringVar(&f.logFormat, "log-format", "text", "log lines as text (without timestamps under systemd, which adds its own) or json")
	fl.StringVar(&f.metricsListen, "metrics-listen", "", "serve Prometheus metrics at http://`HOST:PORT`/metrics, e.g. 127.0.0.1:9477 (default: off; they name who holds each GPU)")
	c.clusterFlags(cmd, &f)
	return cmd
}

// agentConfig merges defaults, the config file and the flags (flags win).
func (c *cli) agentConfig(cmd *cobra.Command, f agentFlags) (agent.Config, agent.Deps, error) {
	var fc config.FileConfig
	path := f.config
	if path == "" {
		if _, err := os.Stat(config.DefaultConfigFile); err == nil {
			path = config.DefaultConfigFile
		}
	}
	if path != "" {
		var err error
		if fc, err = config.LoadFile(path); err != nil {
			return agent.Config{}, agent.Deps{}, err
		}
	}
	set := cmd.Flags().Changed
	pick := func(flag, fromFlag, fromFile, def string) string {
		if set(flag) {
			return fromFlag
		}
		if fromFile != "" {
			return fromFile
		}
		return def
	}
	host, _ := os.Hostname()
	root := os.Geteuid() == 0
	defData, defSock := "/var/lib/dibs", api.SystemSocket
	if !root {
		state := os.Getenv("XDG_STATE_HOME")
		if state == "" {
			home, _ := os.UserHomeDir()
			state = filepath.Join(home, ".local", "state")
		}
		defData = filepath.Join(state, "dibs")
		defSock = api.UserSocket(os.Getenv)
	}
	sock := c.socket
	if sock == "" {
		sock = pick("", "", fc.Socket, "")
	}
	if sock == "" {
		if s := os.Getenv("DIBS_SOCKET"); s != "" {
			sock = s
		} else {
			sock = defSock
		}
	}
	policy, err := fc.Leases.Policy(lease.DefaultPolicy())
	if err != nil {
		return agent.Config{}, agent.Deps{}, err
	}
	sched, err := fc.Queue.Sched()
	if err != nil {
		return agent.Config{}, agent.Deps{}, err
	}
	if policy.Pools, err = fc.PoolLimits(); err != nil {
		return agent.Config{}, agent.Deps{}, err
	}
	sched.Pools = policy.Pools
	sig, err := fc.Queue.PreemptSig()
	if err != nil {
		return agent.Config{}, agent.Deps{}, err
	}
	if fc.Queue.PreemptGrace != "" {
		if policy.PreemptGrace, err = words.ParseDuration(fc.Queue.PreemptGrace); err != nil {
			return agent.Config{}, agent.Deps{}, err
		}
	}
	keep, err := fc.Events.KeepFor()
	if err != nil {
		return agent.Config{}, agent.Deps{}, err
	}
	interval := time.Second
	if fc.ProbeInterval != "" {
		interval, _ = time.ParseDuration(fc.ProbeInterval)
	}
	if set("probe-interval") {
		if f.probeInterval < 100*time.Millisecond {
			return agent.Config{}, agent.Deps{}, fmt.Errorf("--probe-interval %s is too short: use 100ms or more", f.probeInterval)
		}
		interval = f.probeInterval
	}
	logger, err := newLogger(c.stderr, f.logFormat, os.Getenv)
	if err != nil {
		return agent.Config{}, agent.Deps{}, err
	}
	cfg := agent.Config{
		NodeName:      pick("node-name", f.nodeName, fc.NodeName, host),
		DataDir:       pick("data-dir", f.dataDir, fc.DataDir, defData),
		Socket:        sock,
		ProbeInterval: interval,
		Policy:        policy,
		Sched:         sched,
		PreemptSignal: sig,
		Log:           logger,
		Version:       buildInfo().Version,
		Tags:          fc.Tags,
		NoCPUBinding:  fc.Leases.BindCPUs != nil && !*fc.Leases.BindCPUs,
		EventKeep:     keep,

		EventsPerUserHour: fc.Events.PerUserHour,
		LedgerPerUserDay:  fc.Events.LedgerPerUserDay,
	}
	if cfg.WebhookAllow, err = fc.Events.Allowlist(); err != nil {
		return cfg, agent.Deps{}, err
	}
	if cfg.LedgerKeep, err = fc.Events.LedgerKeepFor(); err != nil {
		return cfg, agent.Deps{}, err
	}
	if err := words.ValidNodeName(cfg.NodeName); err != nil {
		return cfg, agent.Deps{}, fmt.Errorf("%w: set --node-name", err)
	}
	if cfg.MetricsListen = pick("metrics-listen", f.metricsListen, fc.Metrics.Listen, ""); cfg.MetricsListen != "" {
		if err := config.CheckListen(cfg.MetricsListen); err != nil {
			return cfg, agent.Deps{}, fmt.Errorf("--metrics-listen: %w", err)
		}
	}
	if err := c.applyClusterFlags(cmd, f, fc, &cfg); err != nil {
		return cfg, agent.Deps{}, err
	}
	if cfg.Proxy, err = proxySettings(fc.Services); err != nil {
		return cfg, agent.Deps{}, err
	}
	prober, err := probe.Open(context.Background(), nodeprobe.Options{
		Backend:  nodeprobe.Backend(pick("backend", f.backend, fc.Backend, "auto")),
		Sim:      pick("sim", f.sim, fc.Sim, ""),
		SimLoad:  pick("sim-load", f.simLoad, fc.SimLoad, ""),
		HostName: cfg.NodeName,
		Logf:     func(f string, args ...any) { logger.Warn(fmt.Sprintf(f, args...)) },
	})
	if err != nil {
		return cfg, agent.Deps{}, err
	}
	// A TMUX_TMPDIR in the agent's environment is honoured, so sessions land
	// where the users' own tmux looks (systemd gives none: /tmp).
	statusDir := filepath.Join(filepath.Dir(sock), "exit")
	// Jobs keep their output through `_pipe-log`, run by tmux as the user.
	// Sessions are bound to their GPUs' cores through this binary's own
	// `_cpus` (once per session, so its start-up cost does not matter,
	// and a client of another release beside it cannot lack it).
	var pipeLog, cpuHelper []string
	if exe, err := os.Executable(); err == nil {
		pipeLog = pipeLogArgv(exe)
		cpuHelper = []string{exe, "_cpus"}
	}
	sessions := launch.New(launch.Options{TmuxTmpDir: os.Getenv("TMUX_TMPDIR"), StatusDir: statusDir, PipeLog: pipeLog,
		CPUHelper: cpuHelper,
		Logf:      func(f string, args ...any) { logger.Warn(fmt.Sprintf(f, args...)) }})
	tryNVML := func(ctx context.Context) error {
		p, err := nvml.Open(ctx, nodeprobe.Options{HostName: cfg.NodeName})
		if err == nil {
			p.Close()
		}
		return err
	}
	deps := agent.Deps{Probe: prober, Sessions: sessions, TryNVML: tryNVML}
	if f := os.Getenv(TestBootIDFileEnv); f != "" {
		deps.Clock = clock.RealBootFrom(f)
	}
	return cfg, deps, nil
}

// TestBootIDFileEnv names a file the agent reads its kernel boot id from
// instead of /proc: a test hook, never set in production, for test nodes
// that share one kernel (network namespaces) but must each reboot on
// their own (the agent tells a reboot from a restart by the boot id).
const TestBootIDFileEnv = "DIBS_TEST_BOOT_ID_FILE"

// pipeLogArgv is the command tmux runs, as the user, to keep each job's
// output (launch.PipeLog). Both binaries carry `_pipe-log`; the client, dibs,
// is preferred when it lies beside this one and passes launch.TrustedBinary
// for this agent's user (owned by root or it, written and swappable by no
// one else, no link on the way that someone else owns: a `dibs → /bin/bash`
// planted beside a dibsd started from /tmp is refused, where a stat that
// followed the link saw root's bash): it is pure Go and a quarter the size
// (no cgo, no NVML), so it starts on half the CPU (3.1 against 6.3 ms,
// docs/benchmarks.md), and it starts once for every job. Otherwise exe,
// this binary.
func pipeLogArgv(exe string) []string {
	client, err := launch.TrustedBinary(filepath.Join(filepath.Dir(exe), "dibs"), os.Geteuid())
	if err == nil {
		return []string{client, "_pipe-log"}
	}
	return []string{exe, "_pipe-log"}
}

// proxySettings are [services]' proxy settings, nil when the proxy is off.
func proxySettings(ss config.ServicesSection) (*agent.ProxySettings, error) {
	r, err := ss.ProxyRange()
	if err != nil || r.IsZero() {
		return nil, err
	}
	idle, err := ss.ProxyIdleFor()
	if err != nil {
		return nil, err
	}
	return &agent.ProxySettings{Ports: r, MaxConns: ss.ProxyMaxConns, MaxPerService: ss.ProxyMaxPerService, IdleTimeout: idle}, nil
}
