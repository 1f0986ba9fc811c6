package httpapi

import (
	"math"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/httpapi/guard"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/wire"
)

// The Grafana endpoints (contract §2.10) flatten the monitoring views into
// top-level JSON arrays of rows, the shape Grafana's JSON/Infinity data sources
// turn into tables and variables. A principal scoped to some prefixes
// (guard/principal.go) sees only their rows and options. They reuse the monitoring computations
// (MembersOf, readOffsets, readPage); what they add is the rows (package
// wire), the owner strings, merged paging across shards and the per-shard rates.

// grafanaPath is the prefix of every Grafana route.
const grafanaPath = "/coord/v1/monitoring/grafana"

// grafanaAPI serves the Grafana routes of one Server. Their Redis columns and
// rates come from the offsets cache (offsetcache.go).
type grafanaAPI struct {
	s     *monitoringAPI
	guard *guard.Guard
}

func (s *Server) registerGrafanaRoutes(a *grafanaAPI) {
	r := s.router
	r.HandleFunc(grafanaPath+"/groups", a.handleGroups).Methods(http.MethodGet)
	r.HandleFunc(grafanaPath+"/options/streams", a.handleStreamOptions).Methods(http.MethodGet)
	r.HandleFunc(grafanaPath+"/options/consumer-groups", a.handleGroupOptions).Methods(http.MethodGet)
	r.HandleFunc(grafanaPath+"/options/shards", a.handleShardOptions).Methods(http.MethodGet)
	r.HandleFunc(grafanaPath+"/members", a.handleMembers).Methods(http.MethodGet)
	r.HandleFunc(grafanaPath+"/shards", a.handleShards).Methods(http.MethodGet)
	r.HandleFunc(grafanaPath+"/assignments", a.handleAssignments).Methods(http.MethodGet)
	r.HandleFunc(grafanaPath+"/messages", a.handleMessages).Methods(http.MethodGet)
}

// Owner states of a shard row.
const (
	ownerUnassigned    = "UNASSIGNED"    // no target, nobody reads it
	ownerPendingAck    = "PENDING_ACK"   // targeted, nobody reports it yet
	ownerCurrent       = "CURRENT"       // read by exactly its target owners
	ownerTransitioning = "TRANSITIONING" // read by others than its target owners
)

// handleGroups serves GET /coord/v1/monitoring/grafana/groups: one row per
// group, sorted by stream prefix then group.
func (a *grafanaAPI) handleGroups(w http.ResponseWriter, r *http.Request) {
	out := []wire.GrafanaGroupRow{}
	for _, g := range sortedGroups(a.s.read.State().Groups()) {
		if !guard.Visible(r, g.Key.StreamPrefix) {
			continue
		}
		offs, rates, err := a.s.readOffsets(r.Context(), g)
		if err != nil {
			a.s.writeError(w, r, err)
			return
		}
		row := wire.GrafanaGroupRow{
			StreamPrefix: g.Key.StreamPrefix, ConsumerGroup: g.Key.ConsumerGroup, State: g.State(),
			GroupEpoch: g.GroupEpoch, AssignmentEpoch: g.AssignmentEpoch, MetadataVersion: g.MetadataVersion,
			ShardCount: g.ShardCount, TotalMembers: g.MemberCount(),
			TotalStreamLength: offs.TotalStreamLength, TotalLag: nonNegative(offs.TotalLag),
			TotalMemoryUsageBytes: offs.TotalMemoryUsageBytes, MemoryUsageKnown: offs.MemoryUsageKnown,
			LagSeconds: offs.LagSeconds, OldestPendingSeconds: offs.OldestPendingSeconds, LagStatus: offs.LagStatus,
		}
		for _, m := range g.EachMember() {
			if m.Live() {
				row.ActiveMembers++
			}
			if m.CanHold() {
				row.CurrentShards += len(m.Current)
				row.RevokingShards += len(m.Revoking)
			}
		}
		for _, t := range g.EachTarget() {
			row.TargetShards += len(t)
		}
		row.AssignedShardRatio = strconv.Itoa(row.CurrentShards) + " / " + strconv.Itoa(g.ShardCount)
		for _, o := range offs.Shards {
			row.TotalPendingCount += max(o.PendingCount, 0)
		}
		row.ProducedPerSecond, row.ConsumedPerSecond = sumRates(rates)
		out = append(out, row)
	}
	writeJSON(w, http.StatusOK, out)
}

// handleStreamOptions serves GET /coord/v1/monitoring/grafana/options/streams:
// every stream prefix with a group, sorted.
func (a *grafanaAPI) handleStreamOptions(w http.ResponseWriter, r *http.Request) {
	out := []wire.GrafanaOptionRow{}
	for _, g := range sortedGroups(a.s.read.State().Groups()) {
		if p := g.Key.StreamPrefix; guard.Visible(r, p) && (len(out) == 0 || out[len(out)-1].Value != p) {
			out = append(out, wire.GrafanaOptionRow{Text: p, Value: p})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleGroupOptions serves GET /coord/v1/monitoring/grafana/options/consumer-groups
// (streamPrefix optional; blank means every prefix): "<prefix> / <group>" per
// group, sorted by prefix then group.
func (a *grafanaAPI) handleGroupOptions(w http.ResponseWriter, r *http.Request) {
	prefix := r.URL.Query().Get("streamPrefix")
	if !a.guard.NamedPrefix(w, r, prefix) {
		return
	}
	out := []wire.GrafanaOptionRow{}
	for _, g := range sortedGroups(a.s.read.State().Groups()) {
		if !guard.Visible(r, g.Key.StreamPrefix) {
			continue
		}
		if blank(prefix) || g.Key.StreamPrefix == prefix {
			out = append(out, wire.GrafanaOptionRow{Text: g.Key.StreamPrefix + " / " + g.Key.ConsumerGroup, Value: g.Key.ConsumerGroup})
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleShardOptions serves GET /coord/v1/monitoring/grafana/options/shards:
// ":<i>" per routed shard of the group; [] when either parameter is blank.
func (a *grafanaAPI) handleShardOptions(w http.ResponseWriter, r *http.Request) {
	g, ok := a.oneGroup(w, r)
	if !ok || g == nil {
		return
	}
	out := make([]wire.GrafanaOptionRow, 0, g.ShardCount)
	for i := 0; i < g.ShardCount; i++ {
		out = append(out, wire.GrafanaOptionRow{Text: shardLabel(i), Value: strconv.Itoa(i)})
	}
	writeJSON(w, http.StatusOK, out)
}

// handleMembers serves GET /coord/v1/monitoring/grafana/members: the group's
// members sorted by id; [] when either parameter is blank.
func (a *grafanaAPI) handleMembers(w http.ResponseWriter, r *http.Request) {
	if a.s.fwd.ToLeader(w, r) {
		return
	}
	rt := a.s.rt
	g, ok := a.oneGroup(w, r)
	if !ok || g == nil {
		return
	}
	k := g.Key
	out := []wire.GrafanaMemberRow{}
	for _, m := range MembersOf(g, rt.MemberRuntimes(k), a.s.read.Config().RebalanceTimeout) {
		out = append(out, wire.GrafanaMemberRow{
			StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, MemberID: m.MemberID, MemberName: m.MemberName,
			State: m.State, MemberEpoch: m.MemberEpoch, MetadataVersion: m.MetadataVersion,
			CurrentShardCount: len(m.CurrentAssignment), RevokingShardCount: len(m.Revoking),
			RuntimeMaxConcurrency: m.RuntimeMaxConcurrency, ActiveConsumerWorkers: m.ActiveConsumerWorkers,
			LastHeartbeatAt: m.LastHeartbeatAt, MemberLeaseExpiresAt: m.MemberLeaseExpiresAt,
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// handleShards serves GET /coord/v1/monitoring/grafana/shards: a row per shard
// stream of the selected groups. A blank streamPrefix or consumerGroup matches
// any; both blank select every group.
func (a *grafanaAPI) handleShards(w http.ResponseWriter, r *http.Request) {
	vals, ok := a.requiredParams(w, r, "streamPrefix", "consumerGroup")
	if !ok || !a.guard.NamedPrefix(w, r, vals[0]) {
		return
	}
	var groups []*projection.Group
	if blank(vals[0]) || blank(vals[1]) {
		for _, g := range sortedGroups(a.s.read.State().Groups()) {
			if !guard.Visible(r, g.Key.StreamPrefix) {
				continue
			}
			if (blank(vals[0]) || g.Key.StreamPrefix == vals[0]) && (blank(vals[1]) || g.Key.ConsumerGroup == vals[1]) {
				groups = append(groups, g)
			}
		}
	} else {
		g, ok := a.groupNamed(w, r, vals[0], vals[1])
		if !ok {
			return
		}
		groups = append(groups, g)
	}
	out := []wire.GrafanaShardRow{}
	for _, g := range groups {
		offs, rates, err := a.s.readOffsets(r.Context(), g)
		if err != nil {
			a.s.writeError(w, r, err)
			return
		}
		owners := ownersByShard(g)
		for i, o := range offs.Shards {
			ow := owners[o.Shard.ShardIndex]
			row := wire.GrafanaShardRow{
				StreamPrefix: o.StreamPrefix, ConsumerGroup: o.ConsumerGroup, ShardCount: g.ShardCount,
				ShardIndex: o.Shard.ShardIndex, ShardLabel: shardLabel(o.Shard.ShardIndex), ShardStream: o.ShardStream,
				LagKnown: o.Lag != nil, ProducedPerSecond: rateAt(rates, i).produced, ConsumedPerSecond: rateAt(rates, i).consumed,
				MemoryUsageBytes: o.MemoryUsageBytes, MemoryUsageKnown: o.MemoryUsageBytes != nil,
				TargetOwnerMemberIDs: strings.Join(ow.target, ","), CurrentOwnerMemberIDs: strings.Join(ow.current, ","),
				OwnerState: ownerState(ow.current, ow.target), OwnerMemberIDs: strings.Join(o.OwnerMemberIDs, ","),
				LagStatus: o.LagStatus,
			}
			row.Lag = nonNegative(o.Lag) // a lag Redis computes below 0 shows as 0
			out = append(out, row)
		}
	}
	writeJSON(w, http.StatusOK, out)
}

// handleAssignments serves GET /coord/v1/monitoring/grafana/assignments: a row
// per shard the group reads; [] when either parameter is blank.
func (a *grafanaAPI) handleAssignments(w http.ResponseWriter, r *http.Request) {
	g, ok := a.oneGroup(w, r)
	if !ok || g == nil {
		return
	}
	owners := ownersByShard(g)
	out := []wire.GrafanaAssignmentRow{}
	for i := 0; i < shardSpan(g); i++ {
		ow := owners[i]
		out = append(out, wire.GrafanaAssignmentRow{
			StreamPrefix: g.Key.StreamPrefix, ConsumerGroup: g.Key.ConsumerGroup, ShardIndex: i,
			TargetOwners: strings.Join(ow.target, ","), CurrentOwners: strings.Join(ow.current, ","),
			RevokingOwners: strings.Join(ow.revoking, ","),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// oneGroup resolves the required streamPrefix and consumerGroup parameters.
// It answers [] itself (and returns a nil group) when either is blank, and the
// error when a parameter is missing or the group is unknown; false means it answered.
func (a *grafanaAPI) oneGroup(w http.ResponseWriter, r *http.Request) (*projection.Group, bool) {
	vals, ok := a.requiredParams(w, r, "streamPrefix", "consumerGroup")
	if !ok || !a.guard.NamedPrefix(w, r, vals[0]) {
		return nil, false
	}
	if blank(vals[0]) || blank(vals[1]) {
		writeJSON(w, http.StatusOK, []any{})
		return nil, true
	}
	return a.groupNamed(w, r, vals[0], vals[1])
}

// requiredParams reads query parameters that must be present (they may be
// blank); a missing one is a 400.
func (a *grafanaAPI) requiredParams(w http.ResponseWriter, r *http.Request, names ...string) ([]string, bool) {
	q := r.URL.Query()
	out := make([]string, len(names))
	for i, n := range names {
		if !q.Has(n) {
			a.s.badRequest(w, r, "Required request parameter '"+n+"' is not present")
			return nil, false
		}
		out[i] = q.Get(n)
	}
	return out, true
}

// groupNamed resolves a group named by query parameters; false means it
// answered (400 for an invalid key, 404 for an unknown group).
func (a *grafanaAPI) groupNamed(w http.ResponseWriter, r *http.Request, prefix, group string) (*projection.Group, bool) {
	k := projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: group}
	if err := commands.ValidateKey(k); err != nil {
		a.s.writeError(w, r, err)
		return nil, false
	}
	return a.s.findGroup(w, r, k)
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }

func shardLabel(i int) string { return ":" + strconv.Itoa(i) }

// sortedGroups orders groups by stream prefix, then group.
func sortedGroups(gs []*projection.Group) []*projection.Group {
	sort.Slice(gs, func(i, j int) bool {
		a, b := gs[i].Key, gs[j].Key
		if a.StreamPrefix != b.StreamPrefix {
			return a.StreamPrefix < b.StreamPrefix
		}
		return a.ConsumerGroup < b.ConsumerGroup
	})
	return gs
}

func nonNegative(v *int64) *int64 {
	if v == nil || *v >= 0 {
		return v
	}
	zero := int64(0)
	return &zero
}

// shardOwners are the member ids, sorted, targeted at a shard and, among the
// members whose shards still count (live or leaving), reading and revoking it.
type shardOwners struct {
	target, current, revoking []string
}

func ownersByShard(g *projection.Group) map[int]shardOwners {
	out := map[int]shardOwners{}
	add := func(s int, f func(*shardOwners)) {
		o := out[s]
		f(&o)
		out[s] = o
	}
	targeted := make([]string, 0, g.TargetCount())
	for id := range g.EachTarget() {
		targeted = append(targeted, id)
	}
	sort.Strings(targeted)
	for _, id := range targeted {
		for _, s := range g.Target(id) {
			add(s, func(o *shardOwners) { o.target = append(o.target, id) })
		}
	}
	for _, id := range g.MemberIDs() {
		m := g.Member(id)
		if !m.CanHold() {
			continue
		}
		for _, s := range m.Current {
			add(s, func(o *shardOwners) { o.current = append(o.current, id) })
		}
		for _, s := range m.Revoking {
			add(s, func(o *shardOwners) { o.revoking = append(o.revoking, id) })
		}
	}
	return out
}

// ownerState compares who reads a shard with who is targeted at it.
func ownerState(current, target []string) string {
	switch {
	case len(current) == 0 && len(target) == 0:
		return ownerUnassigned
	case len(current) == 0:
		return ownerPendingAck
	case sameSet(current, target):
		return ownerCurrent
	}
	return ownerTransitioning
}

func sameSet(a, b []string) bool {
	in := map[string]bool{}
	for _, x := range a {
		in[x] = true
	}
	seen := map[string]bool{}
	for _, x := range b {
		if !in[x] {
			return false
		}
		seen[x] = true
	}
	return len(seen) == len(in)
}

// Rates. A stream's produced rate is its length growth between two reads of
// the offsets cache; its consumed rate is (length growth - lag growth) per
// second, both floored at 0 and rounded to 2 decimals. The first read of a
// stream has no rate; consumed is also unknown while Redis cannot tell the lag.
// Reads are kept per consumer group and stream key (lag is per group) and
// forgotten after rateMemoryTTL without one.

// rateMemoryTTL is how long an observation is kept without a newer one.
const rateMemoryTTL = 10 * time.Minute

type rateKey struct{ group, streamKey string }

type rateSample struct {
	at     time.Time
	length int64
	lag    *int64
}

type shardRate struct{ produced, consumed *float64 }

// rateSweepEvery is how often observe forgets expired observations: a sweep
// walks them all, and one overview request observes every shard of every group.
const rateSweepEvery = time.Minute

// rateMemory is the previous observation of every stream seen lately.
type rateMemory struct {
	mu        sync.Mutex
	last      map[rateKey]rateSample
	lastSweep time.Time
}

func newRateMemory() *rateMemory { return &rateMemory{last: map[rateKey]rateSample{}} }

// observe records the offsets as seen at now and returns each shard's rate
// since its previous observation, in the order of offs.
func (m *rateMemory) observe(group string, offs []wire.ShardOffset, now time.Time) []shardRate {
	m.mu.Lock()
	defer m.mu.Unlock()
	if now.Sub(m.lastSweep) >= rateSweepEvery {
		for k, s := range m.last {
			if now.Sub(s.at) > rateMemoryTTL {
				delete(m.last, k)
			}
		}
		m.lastSweep = now
	}
	out := make([]shardRate, len(offs))
	for i, o := range offs {
		k := rateKey{group: group, streamKey: o.StreamKey}
		cur := rateSample{at: now, length: max(o.StreamLength, 0), lag: nonNegative(o.Lag)}
		if prev, ok := m.last[k]; ok && now.Sub(prev.at) <= rateMemoryTTL {
			out[i] = rateBetween(prev, cur)
		}
		m.last[k] = cur
	}
	return out
}

// rateAt is rates[i], or no rate.
func rateAt(rates []shardRate, i int) shardRate {
	if i < len(rates) {
		return rates[i]
	}
	return shardRate{}
}

func rateBetween(prev, cur rateSample) shardRate {
	secs := cur.at.Sub(prev.at).Seconds()
	if secs <= 0 {
		return shardRate{}
	}
	produced := max(cur.length-prev.length, 0)
	r := shardRate{produced: roundRate(float64(produced) / secs)}
	if cur.lag != nil && prev.lag != nil {
		consumed := max(produced-(*cur.lag-*prev.lag), 0)
		r.consumed = roundRate(float64(consumed) / secs)
	}
	return r
}

// sumRates adds the known rates of a group's shards (nil when none is known).
func sumRates(rates []shardRate) (produced, consumed *float64) {
	sum := func(pick func(shardRate) *float64) *float64 {
		var total float64
		known := false
		for _, r := range rates {
			if v := pick(r); v != nil {
				total += *v
				known = true
			}
		}
		if !known {
			return nil
		}
		return roundRate(total)
	}
	return sum(func(r shardRate) *float64 { return r.produced }), sum(func(r shardRate) *float64 { return r.consumed })
}

func roundRate(v float64) *float64 {
	r := math.RoundToEven(v*100) / 100
	return &r
}
