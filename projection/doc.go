// Package projection folds the event log into the coordinator's in-memory state:
// groups, members, target assignments, reshardings and per-group history.
//
// Apply is the only mutation. It is deterministic: it never reads the clock, the
// network or a random source, so replaying the same log always yields
// byte-identical state (see State.Encode). It validates nothing that could fail on
// a log already written, except the order of stream ids.
//
// Its views (view.go) are plain values without JSON tags; wire.go maps them
// into package wire's shapes, the one mapping httpapi answers with and replay
// prints.
//
// It imports events and wire (data only) and internal/cow (the copy-on-write
// layer its overlay is made of) and nothing else from the repository.
package projection
