package lease

// DiedInReboot reports whether l's session died with its node in a reboot
// the agent did not see: the node now runs under the kernel boot id boot,
// and l was last written under another (its monotonic limits name the boot
// that wrote them), or — for a lease written before leases named their
// boot — the node's last recorded boot (lastBoot) is not this one. A boot
// id that is unknown ("") decides nothing: an agent restart is never taken
// for a reboot. Only a lease with a session dies so: a bare claim holds
// GPUs for work that is not the node's to watch, a gang reservation not
// yet committed expires by itself, and a service's lease is kept: its
// supervisor finds the session gone and starts it again in place, as
// after any death of its process.
func DiedInReboot(l Lease, lastBoot, boot string) bool {
	if boot == "" || l.Session == "" || !l.ReservedUntil.IsZero() || l.IsService() {
		return false
	}
	if l.Mono != nil && l.Mono.Boot != "" {
		return l.Mono.Boot != boot
	}
	return lastBoot != "" && lastBoot != boot
}
