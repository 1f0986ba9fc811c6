package chaos

import (
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Fault kinds and operation names, as the summary table shows them.
const (
	FaultCoordinatorKill = "coordinator kill -9"
	FaultMemberKill      = "member process kill -9"
	FaultRedisRestart    = "redis restart (AOF)"
	FaultCrashHook       = "coordinator crash after an event (hook)"

	OpScaleOut = "scale-out"
	OpScaleIn  = "scale-in"
	OpRollback = "rollback requested"
	OpResent   = "scale request re-sent"
	OpRound    = "round (group created, checked, closed)"
)

// Report is what rounds did and found. Add merges rounds.
type Report struct {
	Rounds     int
	Operations map[string]int
	Faults     map[string]int
	// KillsDuringResharding counts coordinator kills while a resharding was
	// not finished (or its request was in flight).
	KillsDuringResharding int
	// OrphanedAtKill is how many entries killed member processes left pending.
	OrphanedAtKill int64
	Violations     []string

	Published     int64 // event ids the producers saw acknowledged
	PublishFailed int64 // messages whose publish returned an error (not counted as published)
	Consumed      int64 // distinct event ids handled
	Handled       int64 // handler successes
	Duplicates    int64 // Handled - Consumed
	Lost          int64 // published, never consumed
	// Unconfirmed are consumed ids whose publish had reported an error (the
	// XADD landed, its answer did not).
	Unconfirmed int64
	LogEvents   int
	Elapsed     time.Duration
}

// NewReport returns an empty report.
func NewReport() *Report {
	return &Report{Operations: map[string]int{}, Faults: map[string]int{}}
}

// Add adds o's counts to r.
func (r *Report) Add(o *Report) {
	r.Rounds += o.Rounds
	for k, v := range o.Operations {
		r.Operations[k] += v
	}
	for k, v := range o.Faults {
		r.Faults[k] += v
	}
	r.KillsDuringResharding += o.KillsDuringResharding
	r.OrphanedAtKill += o.OrphanedAtKill
	r.Violations = append(r.Violations, o.Violations...)
	r.Published += o.Published
	r.PublishFailed += o.PublishFailed
	r.Consumed += o.Consumed
	r.Handled += o.Handled
	r.Duplicates += o.Duplicates
	r.Lost += o.Lost
	r.Unconfirmed += o.Unconfirmed
	if o.LogEvents > r.LogEvents {
		r.LogEvents = o.LogEvents
	}
	r.Elapsed += o.Elapsed
}

// TotalFaults is the number of faults injected.
func (r *Report) TotalFaults() int {
	n := 0
	for _, v := range r.Faults {
		n += v
	}
	return n
}

// TotalOperations is the number of operations done.
func (r *Report) TotalOperations() int {
	n := 0
	for _, v := range r.Operations {
		n += v
	}
	return n
}

// Summary is one line with the figures.
func (r *Report) Summary() string {
	return fmt.Sprintf("published %d, consumed %d, duplicates %d, lost %d, publish errors %d (of which delivered anyway %d); coordinator kills %d + hook crashes %d (%d during a resharding), member kills %d (%d entries left pending at the kill), redis restarts %d; violations %d; %s",
		r.Published, r.Consumed, r.Duplicates, r.Lost, r.PublishFailed, r.Unconfirmed,
		r.Faults[FaultCoordinatorKill], r.Faults[FaultCrashHook], r.KillsDuringResharding, r.Faults[FaultMemberKill], r.OrphanedAtKill,
		r.Faults[FaultRedisRestart], len(r.Violations), r.Elapsed.Round(100*time.Millisecond))
}

// WriteTable writes the summary table.
func (r *Report) WriteTable(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	row := func(section, name string, v any) { fmt.Fprintf(tw, "%s\t%s\t%v\n", section, name, v) }
	row("SECTION", "WHAT", "COUNT")
	row("run", "rounds", r.Rounds)
	row("run", "elapsed", r.Elapsed.Round(time.Second))
	row("run", "coordinator log events (last fold)", r.LogEvents)
	for _, k := range sortedKeys(r.Operations) {
		row("operations", k, r.Operations[k])
	}
	row("operations", "total", r.TotalOperations())
	for _, k := range sortedKeys(r.Faults) {
		row("faults", k, r.Faults[k])
	}
	row("faults", "coordinator kills/crashes during a resharding", r.KillsDuringResharding)
	row("faults", "entries pending on killed members", r.OrphanedAtKill)
	row("faults", "total", r.TotalFaults())
	row("messages", "published (acknowledged)", r.Published)
	row("messages", "consumed (distinct ids)", r.Consumed)
	row("messages", "handler calls", r.Handled)
	row("messages", "duplicated (calls - distinct)", r.Duplicates)
	row("messages", "lost (published, never consumed)", r.Lost)
	row("messages", "publish errors", r.PublishFailed)
	row("messages", "delivered despite a publish error", r.Unconfirmed)
	row("invariants", "violations (must be 0)", len(r.Violations))
	tw.Flush()
	if len(r.Violations) > 0 {
		fmt.Fprintf(w, "\nviolations:\n  %s\n", strings.Join(r.Violations, "\n  "))
	}
}

func sortedKeys(m map[string]int) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
