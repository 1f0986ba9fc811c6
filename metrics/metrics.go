package metrics

import (
	"cmp"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/gorilla/mux"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/rs/zerolog"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/coordinator"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Path is the route of the exposition endpoint.
const Path = "/metrics"

// DefaultInterval is how often Redis-derived values are refreshed.
const DefaultInterval = 10 * time.Second

// Config configures the metrics. Zero values take the defaults.
type Config struct {
	// Interval between refreshes of the Redis-derived gauges (DefaultInterval);
	// negative disables the refresher (those gauges are then never exported).
	Interval time.Duration
	// RefreshTimeout bounds one refresh (defaults to Interval, at most 30s).
	RefreshTimeout time.Duration
	Logger         zerolog.Logger
	// Now is the clock for resharding ages (time.Now).
	Now func() time.Time
	// MaxGroups is how many groups (the oldest) get series of their own
	// (DefaultMaxGroups; negative: every group); the others are added up
	// (groups.go).
	MaxGroups int
	// MaxShards is how many shards, of those groups (oldest first), get
	// series of their own (DefaultMaxShards; negative: every shard); the
	// shards of a group past it are added up under shard="*".
	MaxShards int
	// CacheFor is how long a scrape's per-group values are reused
	// (DefaultCacheFor; negative: read at every scrape).
	CacheFor time.Duration
}

// Metrics owns a registry with every rsc_* metric and the Go runtime and
// process collectors.
type Metrics struct {
	cfg Config
	reg *prometheus.Registry

	httpRequests   *prometheus.CounterVec
	httpDuration   *prometheus.HistogramVec
	heartbeats     *prometheus.CounterVec
	eventsAppended *prometheus.CounterVec
	shardsRepaired *prometheus.CounterVec
	unfenced       *prometheus.CounterVec
	autoscale      *prometheus.CounterVec
	refreshErrors  *prometheus.CounterVec

	mu      sync.Mutex
	coord   *coordinator.Coordinator
	offsets OffsetReader
	redis   redisValues

	cacheMu sync.Mutex
	cache   summaryCache
}

// New builds the metrics that need nothing but hooks. Watch adds the ones that
// read the coordinator; it must be called once the coordinator exists (the
// AfterAppend hook has to be handed to coordinator.New before that).
func New(cfg Config) *Metrics {
	cfg.Interval = cmp.Or(cfg.Interval, DefaultInterval)
	if cfg.RefreshTimeout <= 0 {
		cfg.RefreshTimeout = min(max(cfg.Interval, time.Second), 30*time.Second)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.MaxGroups = cmp.Or(cfg.MaxGroups, DefaultMaxGroups)
	cfg.MaxShards = cmp.Or(cfg.MaxShards, DefaultMaxShards)
	cfg.CacheFor = cmp.Or(cfg.CacheFor, DefaultCacheFor)
	m := &Metrics{cfg: cfg, reg: prometheus.NewRegistry()}
	m.httpRequests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rsc_http_requests_total",
		Help: "HTTP requests served, by route template, method and response status code.",
	}, []string{"route", "method", "status"})
	m.httpDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "rsc_http_request_duration_seconds",
		Help:    "Time to serve an HTTP request, by route template and method.",
		Buckets: prometheus.DefBuckets,
	}, []string{"route", "method"})
	m.heartbeats = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rsc_heartbeats_total",
		Help: "Member heartbeats the coordinator answered, by protocol status (OK, RETRY, FENCED_MEMBER_EPOCH, ...) or, for error answers, by errorCode. Requests refused before they reach the coordinator (authentication, a malformed body) are only in rsc_http_requests_total.",
	}, []string{"status"})
	m.eventsAppended = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rsc_events_appended_total",
		Help: "Events this process appended to the log, by event type.",
	}, []string{"type"})
	m.shardsRepaired = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rsc_shards_repaired_total",
		Help: "Routed shards whose stream or consumer group Redis had lost and the coordinator recreated (group.shards_repaired events this process appended).",
	}, groupLabels)
	m.unfenced = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rsc_unfenced_writes_total",
		Help: "Entries found on a fenced shard of an ordered group after its cutover that no fence check let in (a producer that does not fence its publishes; the per-key order guarantee does not cover them): resharding.unfenced_writes events this process appended.",
	}, groupLabels)
	m.autoscale = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rsc_autoscaling_decisions_total",
		Help: "Shard-count changes the autoscaler decided, by direction (OUT, IN) and outcome (applied: a resharding was requested; dry_run: recorded only; refused: the resharding could not start).",
	}, []string{"stream_prefix", "consumer_group", "direction", "outcome"})
	m.refreshErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rsc_metrics_refresh_errors_total",
		Help: "Failed reads of the periodic metrics refresh, by source (log, shards); the affected gauges are dropped until a read succeeds.",
	}, []string{"source"})
	m.reg.MustRegister(m.httpRequests, m.httpDuration, m.heartbeats, m.eventsAppended, m.shardsRepaired, m.unfenced, m.autoscale, m.refreshErrors,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// Registry is the registry behind /metrics (tests gather from it).
func (m *Metrics) Registry() *prometheus.Registry { return m.reg }

// Handler serves the exposition format.
func (m *Metrics) Handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg, ErrorLog: promLogger{m.cfg.Logger}})
}

// Mount is httpapi's Config.Mount: it registers GET /metrics.
func (m *Metrics) Mount(r *mux.Router) {
	r.Handle(Path, m.Handler()).Methods(http.MethodGet)
}

// Observe is httpapi's Config.Observe.
func (m *Metrics) Observe(route, method string, status int, elapsed time.Duration) {
	method = normalizeMethod(method)
	m.httpRequests.WithLabelValues(route, method, strconv.Itoa(status)).Inc()
	m.httpDuration.WithLabelValues(route, method).Observe(elapsed.Seconds())
}

// AfterAppend is commands' Config.AfterAppend.
func (m *Metrics) AfterAppend(rec events.Record) {
	m.eventsAppended.WithLabelValues(rec.Type).Inc()
	switch ev := rec.Event.(type) {
	case *events.ShardsRepaired:
		m.shardsRepaired.WithLabelValues(rec.StreamPrefix, rec.ConsumerGroup).Add(float64(len(ev.Shards)))
	case *events.UnfencedWrites:
		var n int64
		for _, w := range ev.Shards {
			n += w.Count
		}
		m.unfenced.WithLabelValues(rec.StreamPrefix, rec.ConsumerGroup).Add(float64(n))
	}
}

// AfterEvaluate is commands' Config.AfterEvaluate: it counts the changes the
// autoscaler decided (holds are not counted).
func (m *Metrics) AfterEvaluate(k projection.GroupKey, v commands.Verdict, outcome string) {
	if v.Change {
		m.autoscale.WithLabelValues(k.StreamPrefix, k.ConsumerGroup, v.Direction, outcome).Inc()
	}
}

// normalizeMethod keeps the method label bounded: clients can send any token.
func normalizeMethod(method string) string {
	switch method {
	case http.MethodGet, http.MethodHead, http.MethodPost, http.MethodPut, http.MethodPatch,
		http.MethodDelete, http.MethodOptions:
		return method
	}
	return "OTHER"
}

// promLogger sends promhttp's encoding errors to the coordinator's log.
type promLogger struct{ log zerolog.Logger }

func (l promLogger) Println(v ...any) { l.log.Error().Msgf("metrics: %v", v) }
