package commands

import (
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// Autoscaling (on-demand groups). Every AutoscaleInterval the leader reads
// each autoscaled group's shards (entries-added, lag, the age of the oldest
// unread entry: one script per shard, outside the writer) and keeps the
// samples in memory; the load over the policy's evaluation window is the
// difference between the newest sample and the newest one at least a window
// older. Evaluate, a pure function of the policy, the group's state and that
// load, says whether to change the shard count and why not otherwise. A change
// is an ordinary resharding requested by "autoscaler", recorded together with
// autoscaling.decided (its evidence); a dry-run policy records the
// recommendation alone. Without a whole window of samples (after a start, a
// failover or while Redis cannot be read) nothing is decided.

// AutoscalerActor is the actor and requestedBy of the autoscaler's decisions.
const AutoscalerActor = "autoscaler"

// Autoscaling defaults and bounds (docs/autoscaling.md).
const (
	DefaultScaleOutCooldown = 60
	DefaultScaleInCooldown  = 300
	DefaultEvaluationWindow = 60
	DefaultMaxStepFactor    = 2.0
	maxAutoscaleSeconds     = 7 * 24 * 3600
	maxStepFactorLimit      = 16.0
	maxTargetRate           = 1e9
	// scaleOutMargin: scale out once the rate is this much above what the
	// current count takes at the target.
	scaleOutMargin = 1.10
	// scaleInFill: scale in only to a count that takes the rate at no more
	// than this share of the target (so the smaller count does not scale
	// straight back out: hysteresis).
	scaleInFill = 0.75
)

// AutoscalingInput is an operator's autoscaling policy (nil: the default, or
// required where noted).
type AutoscalingInput struct {
	Enabled          *bool
	MinShards        *int     // required
	MaxShards        *int     // required
	TargetRate       *float64 // required
	MaxLagSeconds    *float64
	ScaleOutCooldown *int
	ScaleInCooldown  *int
	EvaluationWindow *int
	MaxStepFactor    *float64
	DryRun           *bool
	RequestedBy      string
	Reason           string
}

// policy validates the input and fills the defaults; problems name the field.
func (r Rules) Policy(in AutoscalingInput) (events.AutoscalingConfigured, []string) {
	p := events.AutoscalingConfigured{
		Enabled: true, ScaleOutCooldown: DefaultScaleOutCooldown, ScaleInCooldown: DefaultScaleInCooldown,
		EvaluationWindow: DefaultEvaluationWindow, MaxStepFactor: DefaultMaxStepFactor,
		RequestedBy: in.RequestedBy, Reason: in.Reason,
	}
	problems := CheckAudit(in.RequestedBy, in.Reason, false)
	if in.Enabled != nil {
		p.Enabled = *in.Enabled
	}
	if in.DryRun != nil {
		p.DryRun = *in.DryRun
	}
	switch {
	case in.MinShards == nil:
		problems = append(problems, "minShards: must not be null")
	case *in.MinShards < 1:
		problems = append(problems, "minShards: must be greater than or equal to 1")
	default:
		p.MinShards = *in.MinShards
	}
	switch {
	case in.MaxShards == nil:
		problems = append(problems, "maxShards: must not be null")
	case *in.MaxShards > r.MaxShardCount:
		problems = append(problems, fmt.Sprintf("maxShards: must be less than or equal to %d (--max-shard-count)", r.MaxShardCount))
	case in.MinShards != nil && *in.MaxShards < *in.MinShards:
		problems = append(problems, "maxShards: must be greater than or equal to minShards")
	case *in.MaxShards < 1:
		problems = append(problems, "maxShards: must be greater than or equal to 1")
	default:
		p.MaxShards = *in.MaxShards
	}
	switch {
	case in.TargetRate == nil:
		problems = append(problems, "targetEntriesPerSecondPerShard: must not be null")
	case !(*in.TargetRate > 0) || *in.TargetRate > maxTargetRate:
		problems = append(problems, fmt.Sprintf("targetEntriesPerSecondPerShard: must be greater than 0 and at most %g", maxTargetRate))
	default:
		p.TargetRate = *in.TargetRate
	}
	if in.MaxLagSeconds != nil {
		if !(*in.MaxLagSeconds > 0) || *in.MaxLagSeconds > maxAutoscaleSeconds {
			problems = append(problems, fmt.Sprintf("maxLagSecondsPerShard: must be greater than 0 and at most %d (omit it for none)", maxAutoscaleSeconds))
		} else {
			p.MaxLagSeconds = *in.MaxLagSeconds
		}
	}
	for _, f := range []struct {
		name string
		in   *int
		out  *int
	}{
		{"scaleOutCooldownSeconds", in.ScaleOutCooldown, &p.ScaleOutCooldown},
		{"scaleInCooldownSeconds", in.ScaleInCooldown, &p.ScaleInCooldown},
		{"evaluationWindowSeconds", in.EvaluationWindow, &p.EvaluationWindow},
	} {
		if f.in == nil {
			continue
		}
		if *f.in < 1 || *f.in > maxAutoscaleSeconds {
			problems = append(problems, fmt.Sprintf("%s: must be between 1 and %d", f.name, maxAutoscaleSeconds))
			continue
		}
		*f.out = *f.in
	}
	if in.MaxStepFactor != nil {
		if !(*in.MaxStepFactor > 1) || *in.MaxStepFactor > maxStepFactorLimit {
			problems = append(problems, fmt.Sprintf("maxStepFactor: must be greater than 1 and at most %g", maxStepFactorLimit))
		} else {
			p.MaxStepFactor = *in.MaxStepFactor
		}
	}
	return p, problems
}

// Load is a group's load over an evaluation window, as the autoscaler sees
// it: Complete when samples span the whole window.
type Load struct {
	Complete   bool
	Window     time.Duration // the span the samples cover
	MeasuredAt time.Time
	Rate       float64 // entries per second, all shards
	Lag        int64   // undelivered entries, all shards (-1: unknown somewhere)
	MaxLagSecs float64 // age of the oldest unread entry on any shard
	Shards     []events.ShardLoad
	// Unreadable is set when the latest read of Redis failed.
	Unreadable string
}

// AutoscaleState is what Evaluate needs of the group besides the policy.
type AutoscaleState struct {
	ShardCount     int
	Resharding     string // the active resharding's id, or why the group is busy ("" when idle)
	CorrectionOpen bool
	LastOutAt      time.Time
	LastInAt       time.Time
	// LastDecision is the last recorded decision (for dry runs: not repeated
	// within the cooldown).
	LastDecision *projection.AutoscaleDecision
}

// Verdict is what Evaluate decides: Change with From, To and Direction, or a
// hold; Reason says why either way, Recommended is the count the load asks
// for within the bounds and step limits (the current count when none).
type Verdict struct {
	Change      bool
	From, To    int
	Direction   string
	Recommended int
	Reason      string
}

// Evaluate is the autoscaling policy: a pure function of the policy, the
// group's state, the load over the window and the time.
//
// The recommended count: above the bounds or below them, the nearest bound;
// when the rate exceeds what the current count takes at the target by 10%
// (or a shard's oldest unread entry is older than maxLagSecondsPerShard),
// the smallest count that takes the rate at the target (for lag alone, one
// step up); when the rate fits a smaller count at 75% of the target (and no
// shard lags beyond half the limit), that count. Each step is limited to a
// factor of maxStepFactor (at least one shard) and to [minShards, maxShards].
// It holds while disabled, without a whole window of load, during a
// resharding or a metadata correction, within the direction's cooldown and
// within one window of the last change; a dry run paces its recorded
// recommendations the same way, as if it had acted on them.
func Evaluate(p events.AutoscalingConfigured, st AutoscaleState, load Load, now time.Time) Verdict {
	cur := st.ShardCount
	v := Verdict{From: cur, To: cur, Recommended: cur}
	hold := func(format string, args ...any) Verdict {
		v.Reason = fmt.Sprintf(format, args...)
		return v
	}
	if !p.Enabled {
		return hold("autoscaling is off")
	}
	if load.Unreadable != "" {
		return hold("no load evidence: %s", load.Unreadable)
	}
	if !load.Complete {
		return hold("measuring: %.0fs of load seen, the window is %ds", load.Window.Seconds(), p.EvaluationWindow)
	}
	rec, why := recommend(p, cur, load)
	v.Recommended = rec
	switch {
	case rec == cur:
		return hold("%s", why)
	case st.Resharding != "":
		return hold("recommends %d shards (%s), but %s", rec, why, st.Resharding)
	case st.CorrectionOpen:
		return hold("recommends %d shards (%s), but a metadata correction is open", rec, why)
	}
	lastOut, lastIn := st.LastOutAt, st.LastInAt
	if d := st.LastDecision; p.DryRun && d != nil && d.Decided.DryRun {
		// A dry run paces its recommendations as if it had acted on them.
		if d.Decided.Direction == events.ScaleIn && d.At.After(lastIn) {
			lastIn = d.At
		} else if d.Decided.Direction != events.ScaleIn && d.At.After(lastOut) {
			lastOut = d.At
		}
	}
	dir, cooldown, last := events.ScaleOut, time.Duration(p.ScaleOutCooldown)*time.Second, lastOut
	if rec < cur {
		dir, cooldown, last = events.ScaleIn, time.Duration(p.ScaleInCooldown)*time.Second, lastIn
	}
	lastChange := lastOut
	if lastIn.After(lastChange) {
		lastChange = lastIn
	}
	window := time.Duration(p.EvaluationWindow) * time.Second
	switch {
	case !last.IsZero() && now.Sub(last) < cooldown:
		return hold("recommends %d shards (%s), but the scale-%s cooldown lasts until %s", rec, why, strings.ToLower(dir), last.Add(cooldown).UTC().Format(time.RFC3339))
	case !lastChange.IsZero() && now.Sub(lastChange) < window:
		return hold("recommends %d shards (%s), but the last change was less than a window ago", rec, why)
	}
	v.Change, v.To, v.Direction = true, rec, dir
	v.Reason = why
	if p.DryRun {
		v.Reason = "dry run: " + why
	}
	return v
}

// recommend is the count the load asks for and why (see Evaluate).
func recommend(p events.AutoscalingConfigured, cur int, load Load) (int, string) {
	switch {
	case cur < p.MinShards:
		return p.MinShards, fmt.Sprintf("%d shards is below minShards %d", cur, p.MinShards)
	case cur > p.MaxShards:
		return p.MaxShards, fmt.Sprintf("%d shards is above maxShards %d", cur, p.MaxShards)
	}
	rate := fmt.Sprintf("%.1f entries/s over %.0fs (target %g per shard)", load.Rate, load.Window.Seconds(), p.TargetRate)
	up := max(cur+1, int(math.Floor(float64(cur)*p.MaxStepFactor)))
	down := min(cur-1, int(math.Ceil(float64(cur)/p.MaxStepFactor)))
	lagging := p.MaxLagSeconds > 0 && load.MaxLagSecs > p.MaxLagSeconds
	if load.Rate > float64(cur)*p.TargetRate*scaleOutMargin || lagging {
		n := int(math.Ceil(load.Rate / p.TargetRate))
		why := rate
		if lagging {
			why = fmt.Sprintf("oldest unread entry %.1fs old (limit %gs); %s", load.MaxLagSecs, p.MaxLagSeconds, rate)
			n = max(n, up)
		}
		n = min(n, up, p.MaxShards)
		if n <= cur {
			return cur, "at maxShards: " + why
		}
		return n, why
	}
	if cur > 1 && (p.MaxLagSeconds == 0 || load.MaxLagSecs <= p.MaxLagSeconds/2) {
		n := max(int(math.Ceil(load.Rate/(p.TargetRate*scaleInFill))), 1)
		if n < cur {
			n = max(n, down, p.MinShards)
			if n < cur {
				return n, rate
			}
			return cur, "at minShards: " + rate
		}
	}
	return cur, "load within the target: " + rate
}

// --- the loop ---

// recordDryRun records a dry-run policy's recommendation, while the policy
// is still a dry run.
func RecordDryRun(t *Tx, k projection.GroupKey, decided *events.AutoscalingDecided) error {
	if g := t.Group(k); g == nil || !g.Autoscaling.Enabled() || !g.Autoscaling.Policy.DryRun {
		return WithMsg(ErrStateConflict, "the autoscaling policy changed")
	}
	t.emitAs(AutoscalerActor, k, decided)
	return nil
}

// Evaluation is the autoscaler's latest evaluation of a group: when, the
// verdict, what became of it (hold, applied, dry_run, refused) and the load.
type Evaluation struct {
	At      time.Time
	Verdict Verdict
	Outcome string
	Load    Load
}

// loadSample is one read of a group's shards as the autoscaler keeps it:
// when, and the entries added to each shard (-1: no stream), which is what a
// load over a window is measured from; the newest read's other figures (lag,
// the oldest unread entry) are kept apart, once.
type LoadSample struct {
	At    time.Time
	Added []int64 // by shard index
}

func NewLoadSample(at time.Time, samples []events.ShardSample) LoadSample {
	n := 0
	for _, x := range samples {
		n = max(n, x.ShardIndex+1)
	}
	s := LoadSample{At: at, Added: make([]int64, n)}
	for i := range s.Added {
		s.Added[i] = -1
	}
	for _, x := range samples {
		if x.Exists && x.ShardIndex >= 0 {
			s.Added[x.ShardIndex] = x.EntriesAdded
		}
	}
	return s
}

// addedOf is the entries added to shard i as of the sample (false: no stream).
func (s LoadSample) addedOf(i int) (int64, bool) {
	if i < 0 || i >= len(s.Added) || s.Added[i] < 0 {
		return 0, false
	}
	return s.Added[i], true
}

// loadOver computes the load between the oldest sample at least window before
// the newest one (or the oldest kept) and the newest, whose full read is
// latest.
func LoadOver(samples []LoadSample, latest map[int]events.ShardSample, window time.Duration) Load {
	if len(samples) == 0 {
		return Load{}
	}
	last := samples[len(samples)-1]
	first := samples[0]
	for _, s := range samples {
		if last.At.Sub(s.At) >= window {
			first = s
		}
	}
	span := last.At.Sub(first.At)
	l := Load{Window: span, MeasuredAt: last.At, Complete: span >= window && span > 0}
	idx := make([]int, 0, len(latest))
	for i := range latest {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	for _, i := range idx {
		s := latest[i]
		if !s.Exists {
			continue
		}
		sl := events.ShardLoad{ShardIndex: i, Lag: s.Lag}
		if span > 0 {
			delta := s.EntriesAdded
			if f, ok := first.addedOf(i); ok && f <= s.EntriesAdded {
				delta -= f
			} else if ok {
				delta = 0 // the stream was recreated: its count restarted
			}
			sl.Rate = float64(delta) / span.Seconds()
		}
		if s.OldestUnreadMs > 0 && s.NowMs > s.OldestUnreadMs {
			sl.LagSeconds = float64(s.NowMs-s.OldestUnreadMs) / 1000
		}
		l.Rate += sl.Rate
		switch {
		case s.Lag < 0 || l.Lag < 0:
			l.Lag = -1
		default:
			l.Lag += s.Lag
		}
		l.MaxLagSecs = max(l.MaxLagSecs, sl.LagSeconds)
		l.Shards = append(l.Shards, sl)
	}
	return l
}

// SetAutoscaling is the decision of PUT .../autoscaling with the policy
// Rules.Policy validated: autoscaling.configured, or ErrGroupNotFound.
func SetAutoscaling(t *Tx, k projection.GroupKey, p events.AutoscalingConfigured) (*projection.Autoscaling, error) {
	if t.Group(k) == nil {
		return nil, ErrGroupNotFound
	}
	return t.emit(k, &p).Autoscaling, nil
}

// DisableAutoscaling is the decision of DELETE .../autoscaling:
// autoscaling.disabled when it is on, nothing when it is not, or
// ErrGroupNotFound.
func DisableAutoscaling(t *Tx, k projection.GroupKey, requestedBy, reason string) (*projection.Autoscaling, error) {
	g := t.Group(k)
	if g == nil {
		return nil, ErrGroupNotFound
	}
	if !g.Autoscaling.Enabled() {
		return g.Autoscaling, nil
	}
	return t.emit(k, &events.AutoscalingDisabled{RequestedBy: requestedBy, Reason: reason}).Autoscaling, nil
}
