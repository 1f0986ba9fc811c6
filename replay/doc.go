// Package replay answers questions about the past from the coordinator's event
// log: what happened (Events), what the coordinator believed at a point
// (StateAt, GroupState), how a group's reshardings unfolded (History), what
// changed between two points (Diff), what undoing a resharding would involve
// (RollbackPlan), and whether a snapshot still agrees with the log (Verify). It
// also moves a log in and out of a JSON-lines file (Export, Import), so the same
// questions can be asked offline about a copy of a production log.
//
// Everything here is a fold of the log into a fresh projection.State through
// projection.Fold, the one fold the coordinator itself uses at start-up, in
// catch-up and as a follower, so the answers are exactly what the coordinator
// would have believed. An entry that does not decode stops the
// work with an error naming its id; nothing is ever skipped.
//
// It imports events, projection and wire (the shapes it prints) and nothing
// else from the repository: it must not import commands or httpapi, so the HTTP layer and cmd/replay can
// both build on it without a cycle. The Redis log is handed in as an events.Log by cmd/replay.
package replay
