// Package metrics exposes the coordinator's Prometheus metrics at GET /metrics.
//
// Three kinds of source feed it:
//
//   - hooks the other packages already offer: httpapi's Config.Observe (every
//     request) and Config.Mount (the /metrics route), commands' Config.AfterAppend
//     (every appended event) and Config.AfterEvaluate (every autoscaling
//     evaluation), and HeartbeatAnswered, which cmd/coordinator calls from a
//     wrapper of the coordinator's Commands with every heartbeat answer;
//   - the projection and the coordinator's own counters, read at scrape time by
//     a custom collector (per-group gauges, readiness, append conflicts);
//   - Redis, read by a refresher goroutine every Config.Interval (log length and
//     last id, projection apply lag, per-shard lag and pending, their ages in
//     seconds and each group's lag status: lag.go), so that shard lag
//     is tracked even when nobody reads the monitoring endpoints; scrapes only
//     return the latest values and never touch Redis. Shard values come through
//     the OffsetReader cmd gives Watch: the HTTP server's cache of shard streams,
//     which its own background pass refreshes, so the gauges add no Redis reads.
//
// It knows commands, projection, events and wire, and reaches Redis only through
// the OffsetReader interface it defines; it must not import httpapi, redisstore
// or cmd.
// /metrics is public (no authentication) by default, like /healthz and
// /readyz: it shows stream prefixes and consumer-group names but no payloads
// or credentials; --metrics-auth requires a principal (httpapi decides).
// What a scrape costs is bounded whatever the tenants register (groups.go):
// per-group values come from the projection's indexes, cached for a second,
// and only the oldest Config.MaxGroups groups have series of their own.
package metrics
