package daemoncmd

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"github.com/dibs-gpu/dibs/agent"
	"github.com/dibs-gpu/dibs/agent/config"
	"github.com/dibs-gpu/dibs/gossip"
)

func (c *cli) clusterFlags(cmd *cobra.Command, f *agentFlags) {
	fl := cmd.Flags()
	fl.StringVar(&f.bind, "bind", "", "gossip address HOST:PORT (default 0.0.0.0:7946 once clustering is on)")
	fl.StringVar(&f.advertise, "advertise", "", "address other agents reach this one at, HOST:PORT")
	fl.StringSliceVar(&f.join, "join", nil, "peers to join, HOST:PORT[,...] (retried until they are up)")
	fl.StringVar(&f.clusterName, "cluster-name", "", "the cluster's name; agents of another cluster are ignored (default dibs)")
	fl.StringVar(&f.keyFile, "cluster-key-file", "", "`FILE` holding the cluster key (make one with: dibs keygen FILE)")
	fl.BoolVar(&f.insecure, "insecure", false, "gossip without encryption (experiments only)")
	fl.StringVar(&f.sshListen, "ssh-listen", "", "serve the board over SSH on HOST:PORT, e.g. :2222")
	fl.StringVar(&f.sshUsers, "ssh-users-file", "", "USER KEYTYPE KEY lines to use instead of each user's ~/.ssh/authorized_keys")
}

// applyClusterFlags turns on clustering when any cluster setting is given,
// and the SSH front door when a listen address is.
func (c *cli) applyClusterFlags(cmd *cobra.Command, f agentFlags, fc config.FileConfig, cfg *agent.Config) error {
	set := cmd.Flags().Changed
	cc := fc.Cluster
	if set("bind") {
		cc.Bind = f.bind
	}
	if set("advertise") {
		cc.Advertise = f.advertise
	}
	if set("join") {
		cc.Join = f.join
	}
	if set("cluster-name") {
		cc.Name = f.clusterName
	}
	if set("cluster-key-file") {
		cc.KeyFile = f.keyFile
	}
	if set("insecure") {
		cc.Insecure = f.insecure
	}
	on := cc.Bind != "" || len(cc.Join) > 0 || cc.KeyFile != "" || cc.Name != "" || cc.Insecure || cc.Advertise != ""
	if on {
		s := agent.ClusterSettings{Join: cc.Join, Name: cc.Name, Insecure: cc.Insecure,
			MaxStreams: cc.MaxStreams, MaxStreamsPerSource: cc.MaxStreamsPerSource}
		if cc.MaxStreams < 0 || cc.MaxStreamsPerSource < 0 {
			return fmt.Errorf("cluster.max_streams and cluster.max_streams_per_source must not be negative")
		}
		if s.Name == "" {
			s.Name = "dibs"
		}
		bind := cc.Bind
		if bind == "" {
			bind = "0.0.0.0:7946"
		}
		var err error
		if s.BindAddr, s.BindPort, err = config.SplitHostPort(bind, 7946); err != nil {
			return fmt.Errorf("--bind: %w", err)
		}
		if cc.Advertise != "" {
			if s.AdvertiseAddr, s.AdvertisePort, err = config.SplitHostPort(cc.Advertise, s.BindPort); err != nil {
				return fmt.Errorf("--advertise: %w", err)
			}
		}
		if cc.KeyFile != "" {
			if s.Key, err = gossip.ReadKeyFile(cc.KeyFile); errors.Is(err, fs.ErrNotExist) {
				return fmt.Errorf("no cluster key at %s: make one on one node with `dibs keygen %s`, copy it to every node (mode 0600), then start the agent", cc.KeyFile, cc.KeyFile)
			} else if err != nil {
				return err
			}
		}
		if s.Key == nil && !s.Insecure && !loopbackOnly(s.BindAddr) {
			return fmt.Errorf("gossip on %s would be unencrypted: make a cluster key with `dibs keygen /etc/dibs/cluster.key`, copy it to every node and pass --cluster-key-file (or --insecure for a throwaway experiment)", bind)
		}
		if s.Insecure {
			cfg.Log.Warn("--insecure: gossip is NOT encrypted or authenticated; anyone who can reach the gossip port can claim GPUs as anyone", "bind", bind)
		}
		cfg.Cluster = &s
	}
	ssh := fc.SSH
	if set("ssh-listen") {
		ssh.Listen = f.sshListen
	}
	if set("ssh-users-file") {
		ssh.UsersFile = f.sshUsers
	}
	if ssh.Listen != "" {
		idle, deadline, err := ssh.Durations()
		if err != nil {
			return err
		}
		cfg.SSH = &agent.SSHSettings{Listen: ssh.Listen, UsersFile: ssh.UsersFile, IdleTimeout: idle, SessionDeadline: deadline,
			MaxSessions: ssh.MaxSessions, MaxPerUser: ssh.MaxPerUser, MaxPerSource: ssh.MaxPerSource, MaxPreAuth: ssh.MaxPreAuth}
	}
	return nil
}

func loopbackOnly(host string) bool {
	ip := net.ParseIP(host)
	return host == "localhost" || (ip != nil && ip.IsLoopback())
}

func keygenCmd(c *cli) *cobra.Command {
	var force bool
	cmd := &cobra.Command{
		Use:   "keygen FILE",
		Short: "Write a new cluster key (32 random bytes) for encrypting gossip",
		Example: `  dibs keygen /etc/dibs/cluster.key
  # then to each other node, leaving no copy elsewhere:
  ssh root@node02 'install -m 0600 /dev/stdin /etc/dibs/cluster.key' < /etc/dibs/cluster.key`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			if _, err := os.Stat(path); err == nil && !force {
				return fmt.Errorf("%s exists: replacing the key splits the cluster until every node has the new one; add --force if you mean it", path)
			}
			key, err := gossip.GenerateKey()
			if err != nil {
				return err
			}
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return err
			}
			tmp := path + ".tmp"
			if err := os.WriteFile(tmp, []byte(gossip.EncodeKey(key)+"\n"), 0o600); err != nil {
				return fmt.Errorf("write key: %w", err)
			}
			if err := os.Rename(tmp, path); err != nil {
				return fmt.Errorf("write key: %w", err)
			}
			abs, err := filepath.Abs(path)
			if err != nil {
				abs = path
			}
			fmt.Fprintf(c.stdout, "wrote a new cluster key to %s (mode 0600); copy it to every other node with\n  ssh root@NODE 'install -m 0600 /dev/stdin %s' < %s\n", path, abs, abs)
			return nil
		},
	}
	cmd.Flags().BoolVar(&force, "force", false, "replace an existing key file")
	return cmd
}
