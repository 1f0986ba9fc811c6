// Package httpapi serves the coordinator's HTTP API: the wire contract of the
// reference coordinator (/coord/v1/...), our audit-history and replay endpoints,
// health and readiness probes.
//
// It knows commands (to decide) and projection views (to answer), through the
// small interfaces of coordinator.go that the coordinator's parts implement;
// every body it reads or writes is one of package wire's, and views.go puts
// projection's views into them. Besides those it imports events (log
// entries for the audit and replay endpoints), routing (stream keys) and docs
// (the OpenAPI description it serves). It reaches Redis for read-only monitoring
// (offsets, messages) only through the StreamReader interface it defines,
// whose messages query is internal/streamread's, shared with redisstore. It
// must not import redisstore or cmd. Its security (authentication, tokens,
// assertions, scope, browser checks, throttling, rate limits, forwarding to
// the leader) is middleware of its subpackage guard, composed once with the
// router in server.go.
package httpapi
