package job

import (
	"fmt"
	"slices"
	"strings"

	"github.com/dibs-gpu/dibs/base/refusal"
	"github.com/dibs-gpu/dibs/base/words"
)

// ContainerIDLen is the length of the short container id dibs records and
// shows (`docker ps`'s, and what nodeprobe reads from a process's cgroup).
const ContainerIDLen = 12

// MaxContainers is how many containers one lease may adopt: enough for a
// holder who restarts a container a few times, small enough that a lease
// stays a small gossip message.
const MaxContainers = 8

// ParseContainerID turns a container id as a person types it (the short id
// `docker ps` prints, or the full one `docker run -d` prints) into the short
// id the board shows; names are not ids, as the agent cannot ask the runtime.
func ParseContainerID(s string) (string, error) {
	id := strings.ToLower(strings.TrimSpace(s))
	if len(id) < ContainerIDLen || len(id) > 64 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", refusal.Invalidf("%s is not a container id: give the id `docker ps` (or `podman ps`) prints, 12 to 64 hex digits, not the container's name", words.QuoteInput(s))
	}
	return id[:ContainerIDLen], nil
}

// CheckContainers refuses a lease's adopted containers that no agent
// records: too many, not short ids, or one twice.
func CheckContainers(ids []string) error {
	if len(ids) > MaxContainers {
		return fmt.Errorf("%d adopted containers, over %d", len(ids), MaxContainers)
	}
	for i, id := range ids {
		if short, err := ParseContainerID(id); err != nil || short != id {
			return fmt.Errorf("adopted container %s is not a short container id", words.QuoteInput(id))
		}
		if slices.Contains(ids[:i], id) {
			return fmt.Errorf("adopted container %s appears twice", id)
		}
	}
	return nil
}
