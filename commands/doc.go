// Package commands decides. Every admin command, heartbeat and maintenance tick is
// validated against the current projection and turned into zero or more events,
// which are appended to the log (compare-and-append) before anyone is answered.
// A command that changes nothing appends nothing.
//
// It knows events and projection, and reaches Redis only through the small
// interfaces in store.go; cmd/coordinator wires the concrete implementations.
package commands
