// Package guard is the HTTP API's security, as middleware: each check is a
// func(http.Handler) http.Handler that the server composes once with its
// router (httpapi's server.go), so that a handler sees an authorized
// principal (PrincipalOf) and nothing of how it was proved.
//
// In the order the server composes them (after its own step that resolves
// the route and bounds the request):
//
//   - Guard.Hosts and Guard.CrossSite: what only a browser tricked by
//     another site would send (browser.go);
//   - Guard.Authenticate: the caller's credentials (a password, checked
//     against the user table, throttled after failures: throttle.go; or a
//     bearer token: tokens.go), or, for a request a --ha follower forwarded,
//     its signed principal assertion (assertion.go);
//   - Guard.Authorize: the role the matched route asks for with this method,
//     then the stream prefix and consumer group scope (principal.go);
//   - Guard.ContentType: a mutation's body is JSON (browser.go);
//   - Forwarder.Writes: a follower relays writes to the leader (forward.go).
//
// What a route asks for is decided by the server from the matched route and
// the method (Access, computed once per request by its Resolve step), never
// from the path text. Rate limits of admin mutations (RateLimiter) are a
// dependency of the handlers that decide them: they are spent after the body
// was read, so a malformed request spends nothing.
//
// The package knows no route of the API and no handler: it imports commands
// for the error kinds it answers with, coordinator for the leader's address
// and role, events for log positions, routing for the names a scope may
// hold, wire for the held heartbeat's header, and gorilla/mux for the route
// a request matched.
package guard
