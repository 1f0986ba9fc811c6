// Package commands decides. Every admin command, heartbeat and maintenance tick is
// validated against the current projection and turned into zero or more events,
// which are appended to the log (compare-and-append) before anyone is answered.
// A command that changes nothing appends nothing.
//
// A decision is a function of a tx: the projection as the batch sees it, its
// view of the runtime table (what lives only in memory), the rules (values
// from the configuration), the evidence it was handed, the request and the
// time. It returns records (emitted into the tx) and an answer; it never
// calls Redis. The writer (decider.go) appends a batch's records, applies
// them and only then commits the batch's runtime changes; a failed decision,
// a conflict and a failed append drop them. The rules live in one file per
// subject: heartbeat.go (the member protocol, CONTRACT.md §3.2),
// maintenance.go, resharding.go, ordering.go, autoscale.go, admin.go,
// quota.go (what one principal or prefix may take), removal.go (a deleted
// group's consumer groups destroyed) and expiry.go (empty registered groups).
//
// Each part is built from the pieces it uses and none holds the whole:
// Service (the commands, httpapi.Commands), the decider, the reconciler and
// autoscaler (Redis work outside the writer), the maintenance tick, Replica
// (load, follow, snapshots; httpapi.Reader), the runtime and evidence tables
// (httpapi.Runtime as RuntimeView) and Leadership (httpapi.Leadership).
// Coordinator only wires them and runs their loops.
//
// It knows events, projection, routing, replay and wire, and reaches Redis
// only through the small interfaces in store.go (one per user: Provisioner,
// DrainReader, Retirer, Remover, Fencer, Repairer, Sampler); cmd/coordinator wires the
// concrete implementations. A heartbeat's request and answer are the member
// protocol itself, so they are package wire's types; every other command
// takes its own input type and answers with projection views.
package commands
