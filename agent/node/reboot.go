package node

import (
	"errors"
	"io/fs"
	"os"
	"strings"

	"github.com/dibs-gpu/dibs/agent/clock"
	"github.com/dibs-gpu/dibs/base/durable"
	"github.com/dibs-gpu/dibs/lease"
)

// Reboot is what Open found of the node's last boot: whether the node
// rebooted while its agent was down (the kernel's boot id changed, not
// merely the agent's), and the leases whose sessions died with it, which
// Open ended with lease.EndRebooted before anything was served.
type Reboot struct {
	// Rebooted: the boot the agent last ran under is not this one.
	Rebooted bool
	// Last is the boot id the agent last ran under ("" when it never
	// recorded one), Boot the one it runs under now.
	Last, Boot string
	// Ended are the leases ended for the reboot; Failed counts those whose
	// end could not be written (they end when their watcher finds the
	// session gone, or at the next start).
	Ended  []lease.Lease
	Failed int
}

// Reboot is what Open found of the node's last boot.
func (n *Node) Reboot() Reboot { return n.reboot }

// endRebootedLocked ends, under wmu at Open, every loaded lease whose
// session died in a reboot (lease.DiedInReboot), then records the boot
// the agent runs under. Callers hold wmu; the table is loaded.
func (n *Node) endRebootedLocked(loaded []lease.Lease, now lease.Instant) {
	boot := now.Boot
	if !clock.KnownBoot(boot) {
		return // no kernel boot id: a restart cannot be told from a reboot
	}
	last, err := readBoot(n.cfg.BootFile)
	if err != nil {
		n.log.Warn("read the boot the agent last ran under; judging each lease by the boot it was written under", "file", n.cfg.BootFile, "err", err)
	}
	n.reboot = Reboot{Last: last, Boot: boot, Rebooted: last != "" && last != boot}
	for _, l := range loaded {
		judged := l
		if l.Mono != nil && !clock.KnownBoot(l.Mono.Boot) {
			// Written by an agent that could not read the kernel's boot
			// id: its boot says nothing, the boot file decides.
			m := *l.Mono
			m.Boot = ""
			judged.Mono = &m
		}
		if !lease.DiedInReboot(judged, last, boot) {
			continue
		}
		n.reboot.Rebooted = true
		if err := n.endLocked(l, lease.EndRebooted, "", now); err != nil {
			n.reboot.Failed++
			continue
		}
		n.reboot.Ended = append(n.reboot.Ended, l)
	}
	if n.reboot.Rebooted {
		n.log.Warn("this node rebooted since its agent last ran: every session of the last boot is gone",
			"last_boot", last, "boot", boot, "leases_ended", len(n.reboot.Ended), "not_ended", n.reboot.Failed)
	}
	if last != boot && n.cfg.BootFile != "" {
		if err := durable.WriteFile(n.cfg.BootFile, []byte(boot+"\n"), 0o644); err != nil {
			n.log.Warn("record the boot the agent runs under (a later reboot is still told by each lease's own boot)", "file", n.cfg.BootFile, "err", err)
		}
	}
}

// readBoot reads a boot file ("" when there is none yet).
func readBoot(path string) (string, error) {
	if path == "" {
		return "", nil
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	return strings.TrimSpace(string(b)), nil
}
