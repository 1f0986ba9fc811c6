// Package commands decides. Every admin command, heartbeat and maintenance tick is
// validated against the current projection and turned into zero or more events,
// which are appended to the log (compare-and-append) before anyone is answered.
// A command that changes nothing appends nothing.
//
// It knows events and projection, and reaches Redis only through the small
// interfaces in store.go; cmd/coordinator wires the concrete implementations.
// A heartbeat's request and answer are the member protocol itself, so they are
// package wire's types; every other command takes its own input type and
// answers with projection views.
package commands
