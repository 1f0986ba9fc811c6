// Package wire holds the bodies of the coordinator's HTTP API: every request
// and response of the v1 contract (/coord/v1/...), of our additions (audit
// history, replay, Grafana rows) and of the probes, as explicit structs whose
// JSON tags are the contract's field names. The server (httpapi), the Go SDK
// (client) and the CLI (cmd/rscctl) all encode and decode these types, so the
// three cannot disagree about a field.
//
// A pointer field is one the contract writes as null (or, in a request, one
// whose absence the server must tell from a zero). null is written out,
// never omitted, except where a tag says omitempty. Field names are the
// contract's even where the code says otherwise: the contract's "migration" is
// what the rest of the repository calls a resharding.
//
// The package is only data: it imports nothing from the repository and
// nothing outside the standard library, so any client can depend on it.
package wire
