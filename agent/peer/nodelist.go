package peer

// NodeLists is the feature gate for queued requests with --nodelist or
// --exclude (queue.QueueEntry.NodeChoice): an older agent's scheduler
// would ignore the lists and place the request anywhere, so none may be
// submitted while a live node speaks an older protocol. A nodelist of one
// on a single-node request is a --node pin, which every scheduler honours,
// and direct claims and bookings are placed by the node they are typed on:
// neither needs the gate.
var NodeLists = Feature{Name: "queued requests with --nodelist or --exclude", Since: 7}
