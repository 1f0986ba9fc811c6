// Package commands holds the rules: it decides. Every admin command,
// heartbeat and maintenance tick is validated against the current projection
// and turned into zero or more events; a command that changes nothing emits
// nothing.
//
// A decision is a function of a Tx: the projection as the batch sees it, its
// view of the runtime table (what lives only in memory: leases, rounds,
// deadlines, quarantines, budgets), the rules (values from the
// configuration, Policy), the evidence it was handed (KeyCheck, Provisioned,
// Cutovers, DrainProof, ...), the request and the time. It returns records
// (emitted into the Tx) and an answer; it never calls Redis, starts no
// goroutine and waits for nothing. The rules live in one file per subject:
// heartbeat.go (the member protocol, CONTRACT.md §3.2), maintenance.go,
// resharding.go, ordering.go, autoscale.go, admin.go, streams.go, quota.go
// (what one principal or prefix may take), removal.go (a deleted group's
// consumer groups destroyed), repair.go and expiry.go (empty registered
// groups); the assignor, the limits, the budgets and the error kinds are
// here too.
//
// It knows events, projection, routing and wire (and internal/cow, the one
// copy-on-write layer its runtime overlay is made of), and nothing that runs:
// no Redis client, no replay, no coordinator (the import-map test in wire
// holds it to that). Package coordinator runs the decisions: the writer,
// the reconciler and its sagas, the loops, the replica and the leadership.
// A heartbeat's request and answer are the member protocol itself, so they
// are package wire's types; every other command takes its own input type.
package commands
