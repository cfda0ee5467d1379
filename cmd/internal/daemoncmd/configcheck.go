package daemoncmd

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/config"
	"github.com/dibs-gpu/dibs/gossip"
)

func configCmd(c *cli) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Work with the agent's config file"}
	cmd.AddCommand(&cobra.Command{
		Use:   "check [FILE]",
		Short: "Check a config file and the cluster key it names, without starting anything",
		Long: `Check a config file as the agent reads it at start: every key and value,
the cluster key file (there, a regular file only its owner can read, and a
valid key), the cluster name, and the addresses. Run it as root, as the agent
runs, so the key can be read. On success it prints "FILE: ok" and what the
agent will do with it: the node's name, the cluster, the ports to open.`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := config.DefaultConfigFile
			if len(args) == 1 {
				path = args[0]
			}
			fc, err := config.LoadFile(path)
			if err != nil {
				return err
			}
			if err := checkClusterKey(path, fc.Cluster); err != nil {
				return err
			}
			if err := checkJoinNames(path, fc.Cluster); err != nil {
				return err
			}
			// The agent's own reading of the cluster and SSH settings, so the
			// check refuses what a start would.
			var cfg agent.Config
			cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
			if err := c.applyClusterFlags(agentCmd(c), agentFlags{}, fc, &cfg); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			if cfg.Proxy, err = proxySettings(fc.Services); err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			fmt.Fprintf(c.stdout, "%s: ok\n", path)
			printConfigSummary(c.stdout, fc, cfg)
			self := fc.NodeName
			if self == "" {
				self, _ = os.Hostname()
			}
			for _, w := range loopbackWarnings(fc, self, lookupHost) {
				fmt.Fprintf(c.stderr, "dibs: warning: %s: %s\n", path, w)
			}
			return nil
		},
	})
	return cmd
}

// clusterOn says whether a config turns clustering on, as the agent decides.
func clusterOn(cc config.ClusterConfig) bool {
	return cc.Bind != "" || len(cc.Join) > 0 || cc.KeyFile != "" || cc.Name != "" || cc.Insecure || cc.Advertise != ""
}

// checkClusterKey checks the cluster's key file as the agent, running as
// root, will read it: set, present, a regular file, readable by its owner
// only, owned by root (or by whoever runs the check, for an agent of one's
// own), and a valid key.
func checkClusterKey(path string, cc config.ClusterConfig) error {
	if !clusterOn(cc) {
		return nil
	}
	kf := cc.KeyFile
	if kf == "" {
		if cc.Insecure {
			return nil
		}
		return fmt.Errorf("%s: [cluster] has no key_file, and the agent will not gossip unencrypted: make a key with `dibs keygen /etc/dibs/cluster.key` and add key_file = \"/etc/dibs/cluster.key\" under [cluster]", path)
	}
	if cc.Insecure {
		return fmt.Errorf("%s: [cluster] has both key_file and insecure = true: drop insecure", path)
	}
	fi, err := os.Stat(kf)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%s: no cluster key at %s: make it once, on one node, with `dibs keygen %s`, then copy it to every node (mode 0600)", path, kf, kf)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%s: cannot look at the cluster key %s as uid %d: run `sudo dibs config check`, as the agent runs as root", path, kf, os.Geteuid())
	case err != nil:
		return fmt.Errorf("%s: cluster key: %w", path, err)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%s: the cluster key %s is not a regular file: make one with `dibs keygen %s`", path, kf, kf)
	case fi.Mode().Perm()&0o077 != 0:
		return fmt.Errorf("%s: the cluster key %s is mode %04o: whoever reads it can act as anyone on every node; chmod 600 %s", path, kf, fi.Mode().Perm(), kf)
	}
	me := os.Geteuid()
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Uid != 0 && int(st.Uid) != me {
		return fmt.Errorf("%s: the cluster key %s belongs to uid %d, who can change it: chown root %s", path, kf, st.Uid, kf)
	}
	if _, err := gossip.ReadKeyFile(kf); errors.Is(err, fs.ErrPermission) {
		return fmt.Errorf("%s: cannot read the cluster key %s as uid %d: run `sudo dibs config check`, as the agent reads it as root", path, kf, me)
	} else if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// checkJoinNames resolves every host name in [cluster] join, as the agent
// will: a name this node cannot resolve never joins, and `dibs attach`
// reaches other nodes by name too.
func checkJoinNames(path string, cc config.ClusterConfig) error {
	for _, j := range cc.Join {
		host, _, err := config.SplitHostPort(j, 7946)
		if err != nil || net.ParseIP(host) != nil {
			continue // LoadFile has refused a malformed one
		}
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		_, err = net.DefaultResolver.LookupHost(ctx, host)
		cancel()
		if err != nil {
			return fmt.Errorf("%s: [cluster] join names %s, which does not resolve on this node: add it to DNS or to /etc/hosts on every node (or give its address)", path, host)
		}
	}
	return nil
}

// printConfigSummary says what the agent will do with a checked config:
// its name, its cluster and the ports a firewall must let through.
func printConfigSummary(w io.Writer, fc config.FileConfig, cfg agent.Config) {
	row := func(k, format string, args ...any) { fmt.Fprintf(w, "  %-10s %s\n", k, fmt.Sprintf(format, args...)) }
	if fc.NodeName != "" {
		row("node", "%s", fc.NodeName)
	} else {
		host, _ := os.Hostname()
		row("node", "%s (the host name)", host)
	}
	if s := cfg.Cluster; s != nil {
		name := fmt.Sprintf("%q", s.Name)
		if fc.Cluster.Name == "" {
			name += " (the default name; every node must have the same)"
		}
		row("cluster", "%s", name)
		if s.Insecure {
			row("key", "none: insecure, gossip is neither encrypted nor authenticated")
		} else {
			row("key", "%s (read, mode 0600)", fc.Cluster.KeyFile)
		}
		join := "none: this node waits for the others to join it"
		if len(s.Join) > 0 {
			join = strings.Join(s.Join, " ")
		}
		row("join", "%s", join)
		row("gossip", "%s:%d, TCP and UDP (open it between the nodes)", orAll(s.BindAddr), s.BindPort)
	} else {
		row("cluster", "off: this agent runs alone (add [cluster] key_file and join to make a cluster)")
	}
	if s := cfg.SSH; s != nil {
		_, port, _ := net.SplitHostPort(s.Listen)
		row("ssh board", "%s, TCP (open it to the people who use the board: ssh -p %s NODE)", s.Listen, port)
	} else {
		row("ssh board", "off")
	}
	if p := cfg.Proxy; p != nil {
		host := ""
		if cfg.Cluster != nil {
			host = cfg.Cluster.BindAddr
		}
		row("proxy", "%s, ports %s, TCP (open the range between the nodes and to the services' clients; the first port is the agents' backend; every node must have the same [services])", orAll(host), p.Ports)
	} else {
		row("proxy", "off")
	}
	if fc.Metrics.Listen != "" {
		row("metrics", "%s, TCP (open it to Prometheus only: the metrics name who holds each GPU)", fc.Metrics.Listen)
	} else {
		row("metrics", "off")
	}
}

func orAll(host string) string {
	if host == "" || host == "0.0.0.0" {
		return "every address"
	}
	return host
}

// lookupHost resolves a join name as the agent will, within 3 s.
func lookupHost(host string) ([]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	return net.DefaultResolver.LookupHost(ctx, host)
}

// loopbackWarnings says which of a clustered config's addresses are
// loopback ones, which no other node can reach, so no cluster forms: a
// bind or advertise of 127.0.0.1, ::1 or localhost, and a join entry that
// is or resolves only to loopback (as a host name does through Debian's
// "127.0.1.1 HOST" line in /etc/hosts) and is not self, this node's own
// name (join lists it too, and it may well resolve to loopback here). The
// config is valid (one node alone can run so), hence warnings, not errors.
// resolve looks names up.
func loopbackWarnings(fc config.FileConfig, self string, resolve func(string) ([]string, error)) []string {
	cc := fc.Cluster
	if !clusterOn(cc) {
		return nil
	}
	loopback := func(host string) bool {
		if strings.EqualFold(host, "localhost") {
			return true
		}
		ip := net.ParseIP(host)
		return ip != nil && ip.IsLoopback()
	}
	var out []string
	for _, a := range []struct{ key, v string }{{"bind", cc.Bind}, {"advertise", cc.Advertise}} {
		if a.v == "" {
			continue
		}
		if host, _, err := config.SplitHostPort(a.v, 7946); err == nil && loopback(host) {
			out = append(out, fmt.Sprintf("[cluster] %s = %q is a loopback address, which no other node can reach: this node cannot form a cluster with them (set it to an address the other nodes reach, or leave %s out)", a.key, a.v, a.key))
		}
	}
	for _, j := range cc.Join {
		host, _, err := config.SplitHostPort(j, 7946)
		if err != nil {
			continue
		}
		if loopback(host) {
			out = append(out, fmt.Sprintf("[cluster] join lists %q, a loopback address: it reaches only this node, never another, so it forms no cluster (list the other nodes' names or addresses)", j))
			continue
		}
		if net.ParseIP(host) != nil || strings.EqualFold(host, self) {
			continue
		}
		addrs, err := resolve(host)
		if err != nil || len(addrs) == 0 {
			continue // checkJoinNames has refused a name that does not resolve
		}
		all := true
		for _, a := range addrs {
			all = all && loopback(a)
		}
		if all {
			out = append(out, fmt.Sprintf("[cluster] join lists %s, which resolves here only to loopback (%s): if it is another node, this node never reaches it, so no cluster forms (fix DNS or /etc/hosts: a \"127.0.1.1 %s\" line belongs only on %s itself)", host, strings.Join(addrs, " "), host, host))
		}
	}
	return out
}
