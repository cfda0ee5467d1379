package launch

import (
	"slices"
	"testing"
)

func TestListeningInodesReadsOnlyListenersOnThePort(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F40 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1001        0 4343 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F41 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1002        0 4444 1 0000000000000000 100 0 0 10 0
`
	if got, want := ListeningInodes(table, 8000), []string{"4242"}; !slices.Equal(got, want) {
		t.Fatalf("port 8000: got %v, want %v (the established connection and port 8001 are not listeners on it)", got, want)
	}
}

// TestClientPortsSeesEveryConnectionToThePort: the connections to the
// service's port, open or closing (TIME_WAIT 06, CLOSE_WAIT 08), are its
// clients, by their remote port; its listener and connections on other
// ports (its own outgoing ones) are not.
func TestClientPortsSeesEveryConnectionToThePort(t *testing.T) {
	table := `  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode
   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000  1001        0 4242 1 0000000000000000 100 0 0 10 0
   1: 0100007F:1F40 0100007F:9C40 01 00000000:00000000 00:00000000 00000000  1001        0 4343 1 0000000000000000 100 0 0 10 0
   2: 0100007F:1F40 0100007F:9C41 06 00000000:00000000 00:00000000 00000000     0        0 0 1 0000000000000000 100 0 0 10 0
   3: 0100007F:1F40 0A000002:C350 08 00000000:00000000 00:00000000 00000000  1001        0 4545 1 0000000000000000 100 0 0 10 0
   4: 0100007F:9C42 0100007F:1F40 01 00000000:00000000 00:00000000 00000000  1001        0 4646 1 0000000000000000 100 0 0 10 0
`
	if got, want := ClientPorts(table, 8000), []int{0x9C40, 0x9C41, 0xC350}; !slices.Equal(got, want) {
		t.Fatalf("port 8000: got %v, want %v", got, want)
	}
}
