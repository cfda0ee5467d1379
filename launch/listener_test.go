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
