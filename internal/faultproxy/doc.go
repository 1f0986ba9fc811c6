// Package faultproxy is a TCP proxy for tests that stands between a Redis
// client and a Redis server and loses replies on purpose: the failure that
// makes a retried write land twice.
//
// The proxy reads the client's commands (RESP arrays or inline commands) and
// the server's replies (RESP2 and RESP3), so it knows which reply answers
// which command. On command it drops the reply of a command after Redis
// executed it — it reads the whole reply from the server and discards it —
// and then closes the client's connection (and its own to the server), or
// keeps it open and silent until the client gives up (Stall). Drops can be
// asked for the next n commands, or for a seeded random share of them,
// optionally only for some command names (EVALSHA, XADD, ...). Cut closes
// every connection at once.
//
// It imports only the standard library and is for tests (and test tools)
// only: it bounds what it parses, but it is no production proxy.
package faultproxy
