package node

import "net"

// The network I/O a gang's ranks need on this node: a port for the
// rendezvous and the interface that holds the node's address. The service
// layer (agent/core) decides when; it does no network I/O of its own.

// FreePort asks the kernel for a port nobody listens on, for the
// rendezvous on rank 0 (torchrun's, or the env:// store of the job's own
// rank 0). The port is free only when asked: the job binds it a second or
// two later, after its imports, and torch 1.13 takes no bound socket. So it
// goes only into the ranks' environments (queue.TorchrunEnv for torchrun;
// launch passes a session's variables in a file only its user can read),
// never on a command line other users can read, where one of them could
// read it and bind it first (issue 31); docs/security.md says what remains.
func FreePort(host string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		if l, err = net.Listen("tcp", ":0"); err != nil {
			return 0, err
		}
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// InterfaceOf names the network interface that holds address host, or ""
// when none does (a name, not an address; an address of another host).
func InterfaceOf(host string) string {
	ip := net.ParseIP(host)
	if ip == nil {
		return ""
	}
	ifaces, err := net.Interfaces()
	if err != nil {
		return ""
	}
	for _, ifc := range ifaces {
		addrs, err := ifc.Addrs()
		if err != nil {
			continue
		}
		for _, a := range addrs {
			if n, ok := a.(*net.IPNet); ok && n.IP.Equal(ip) {
				return ifc.Name
			}
		}
	}
	return ""
}
