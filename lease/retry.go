package lease

// A retried request gets what the first one got: a claim whose answer was
// lost (same caller, same request id), a queued attempt started twice, an
// attempt that already ran here.

// ByRequest finds the lease a caller's earlier claim with the same request
// id made, so a retried claim whose answer was lost gets that lease back
// instead of more GPUs.
func (t *Table) ByRequest(uid int, requestID string) (Lease, bool) {
	if requestID == "" {
		return Lease{}, false
	}
	for _, e := range t.leases {
		if e.UID == uid && e.RequestID == requestID {
			l := e.Lease
			l.Mono = nil
			return l, true
		}
	}
	return Lease{}, false
}

// ByEntry finds the lease (or reservation) started for a queued attempt, so
// a retried start gets what the first one got.
func (t *Table) ByEntry(key string) (Lease, bool) {
	for _, e := range t.leases {
		if e.Entry == key {
			l := e.Lease
			l.Mono = nil
			return l, true
		}
	}
	return Lease{}, false
}

// RanBefore reports how an attempt that already ran here ended: an attempt
// never runs twice on one node, whatever a late or repeated start says.
func RanBefore(ended []EndedRun, key string) (EndedRun, bool) {
	for _, x := range ended {
		if x.Entry == key && !x.Reserved {
			return x, true
		}
	}
	return EndedRun{}, false
}

// ValidRequestID accepts the ids clients put on claims: 8 to 64 letters,
// digits, '-' and '_'.
func ValidRequestID(s string) bool {
	if len(s) < 8 || len(s) > 64 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}
