package peer

// QueuedMIG is the feature gate for queued MIG instances (`--queue
// --mig`): an older agent's scheduler would read such an entry as a
// request for one whole GPU and start it so, so none may be submitted
// while a live node speaks an older protocol.
var QueuedMIG = Feature{Name: "queued MIG instances (--queue --mig)", Since: 7}
