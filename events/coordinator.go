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
