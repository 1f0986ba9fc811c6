package events

// TermStarted is written by a coordinator replica (--ha) as its first append
// after it acquired the leader lease: from this entry on, until the next
// TermStarted, every entry was appended by that replica under fencing token
// Term. It belongs to no group and changes no state; it tells a reader of the
// log who decided when, and where one leader's decisions end and the next
// one's begin (its predecessor's last entry is the one before it).
type TermStarted struct {
	Term   int64  `msgpack:"term" json:"term"`     // the fencing token of the term
	Holder string `msgpack:"holder" json:"holder"` // replica identity in the lease (coordinator id and a per-process nonce)
	URL    string `msgpack:"url" json:"url"`       // where that replica took forwarded writes
}

func (TermStarted) EventType() string { return "coordinator.term_started" }

func init() {
	Register("coordinator.term_started", func() Event { return &TermStarted{} })
}

// LogRepaired is written by `replay repair` as the last entry of the log it
// rewrote: every entry of the log before the repair kept its id, except the
// ones left out (Skipped; with Through, every entry after it as well, to
// start again from the kept snapshot taken there). The log before the repair
// is kept under PreviousLog, and the kept snapshots taken at or after the
// first entry left out were set aside (SnapshotsSetAside), so the next start
// folds the repaired log from before it. It belongs to no group and changes
// no state: it tells a reader of the log who removed what, when and why.
type LogRepaired struct {
	RequestedBy string `msgpack:"requestedBy" json:"requestedBy"`
	Reason      string `msgpack:"reason" json:"reason"`
	// Skipped lists the ids left out, at most MaxRepairIDs of them;
	// SkippedCount counts them all.
	Skipped      []string `msgpack:"skipped" json:"skipped"`
	SkippedCount int64    `msgpack:"skippedCount" json:"skippedCount"`
	// Through is the last entry kept by a repair that starts again from the
	// snapshot taken at it ("" when only Skipped were left out).
	Through           string   `msgpack:"through,omitempty" json:"through,omitempty"`
	PreviousLog       string   `msgpack:"previousLog" json:"previousLog"`
	SnapshotsSetAside []string `msgpack:"snapshotsSetAside,omitempty" json:"snapshotsSetAside,omitempty"`
	// LeaseIgnored: a coordinator held the log's lease, and the repair was
	// told to go on (replay repair --ignore-lease).
	LeaseIgnored bool `msgpack:"leaseIgnored,omitempty" json:"leaseIgnored,omitempty"`
}

// MaxRepairIDs bounds the ids a log.repaired entry lists.
const MaxRepairIDs = 1000

func (LogRepaired) EventType() string { return "log.repaired" }

func init() {
	Register("log.repaired", func() Event { return &LogRepaired{} })
}

// LogRestored is written by the coordinator when an operator restores a log
// that lost entries the coordinator had applied (a Redis restart without
// persistence, FLUSHALL, eviction, a failover that lost acknowledged
// entries: POST /coord/v1/log/restore). The state the coordinator kept in
// memory, at RestoredFrom, was stored as the snapshot taken at this entry
// before the entry was appended: the state after this entry is that
// snapshot's, and the log goes on from it. A fold reaches it from that
// snapshot, or from the state at RestoredFrom, which this entry continues;
// from any other state it cannot (projection.RestoredError). It belongs to
// no group.
type LogRestored struct {
	// RestoredFrom is the id of the last entry the restored state had
	// applied (the log no longer held it).
	RestoredFrom string `msgpack:"restoredFrom" json:"restoredFrom"`
	// LogLastID is the log's last id before this entry (0-0: the log was
	// gone), Cause what the coordinator found (LOG_GONE: the log key was
	// gone or empty; ENTRIES_LOST: it lost entries the state had applied),
	// and LostEntries how many of those it counted (at least that many when
	// the count reached its bound).
	LogLastID   string `msgpack:"logLastId" json:"logLastId"`
	Cause       string `msgpack:"cause" json:"cause"`
	LostEntries int64  `msgpack:"lostEntries" json:"lostEntries"`
	RequestedBy string `msgpack:"requestedBy" json:"requestedBy"`
	Reason      string `msgpack:"reason" json:"reason"`
	// Coordinator is the id of the coordinator (the --ha leader) that
	// restored it.
	Coordinator string `msgpack:"coordinator" json:"coordinator"`
}

func (LogRestored) EventType() string { return "log.restored" }

func init() {
	Register("log.restored", func() Event { return &LogRestored{} })
}
