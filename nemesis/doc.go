// Package nemesis proves dibs's promises the way Jepsen proves a lock
// service's: clients claim, release, extend, read, queue and cancel against
// several real agents (real memberlist on loopback, a fault-injecting store
// each) while a nemesis kills, pauses, partitions and slows them, steps
// their clocks, fails their disks, and reboots their nodes or cuts their
// power; every client operation, every durable write and every fault is
// recorded, and a checker reads the whole history.
package nemesis
