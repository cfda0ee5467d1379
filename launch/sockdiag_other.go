//go:build !linux

package launch

// Listening are the TCP sockets listening on port: none where there is no
// /proc (the proxy's owner check then refuses every connection).
func Listening(port int) []Socket { return ListeningSocketsIn("/proc/self/net", port) }
