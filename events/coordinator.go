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
