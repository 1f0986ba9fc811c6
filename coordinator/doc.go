// Package coordinator runs the rules of package commands: everything that
// runs, waits or touches Redis lives here, and nothing here decides.
//
// The writer (decider.go) is the single writer of the log in this process:
// it runs each decision of commands against an overlay of the projection
// and of the runtime table, appends what the batch emitted
// (compare-and-append), applies it, commits the runtime changes and only
// then answers. Service (httpapi.Commands) validates a command, gathers the
// evidence its decision needs through the reconciler, submits the decision
// and answers. The reconciler and its sagas (fences, provisioning,
// retirement, repair, removal) do the Redis work outside the writer and hand
// their evidence to a decision; the loops (maintenance, autoscaler) submit
// decisions on a tick; Replica loads (loader.go), follows, snapshots
// (snapshots.go) and trims (trimmedlog.go) the log
// (through replay's checks); Leadership holds the lease. Coordinator only
// wires the parts and runs their loops.
//
// It knows commands, events, projection, replay, routing and wire, and
// reaches Redis only through the small interfaces in store.go (one per user:
// Provisioner, DrainReader, Retirer, Remover, Fencer, Repairer, Sampler);
// cmd/coordinator wires the concrete implementations.
package coordinator
