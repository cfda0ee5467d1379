package store

// NoSync skips fsync on s's commits, so tests that write a great deal stay
// fast. Nothing outside tests may do this: it gives up durability.
func NoSync(s *Bolt) { s.db.NoSync = true }
