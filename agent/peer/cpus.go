package peer

// ChosenCores is the feature gate for --cpus-per-gpu: an agent before
// CPUsSince would grant the GPUs and drop the cores without a word (and
// its scheduler would start a queued run's ranks so), so none may be
// asked for while a live node speaks an older protocol. Binding a session
// to its GPUs' local cores needs no gate: each node does it for its own
// sessions, and an older node simply does not.
var ChosenCores = Feature{Name: "--cpus-per-gpu", Since: CPUsSince}
