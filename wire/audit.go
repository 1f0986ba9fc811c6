package wire

import "time"

// AuditEvent is one event of the audit history. Payload is the event as the
// log holds it (its fields depend on Type).
type AuditEvent struct {
	ID            string    `json:"id"`
	Type          string    `json:"type"`
	Time          time.Time `json:"time"`
	Actor         string    `json:"actor"`
	RequestID     string    `json:"requestId"`
	StreamPrefix  string    `json:"streamPrefix"`
	ConsumerGroup string    `json:"consumerGroup"`
	Payload       any       `json:"payload"`
	// Unreadable says why the entry's event cannot be read (its payload is
	// null): it quarantines its stream prefix. Omitted for every readable
	// entry.
	Unreadable string `json:"unreadable,omitempty"`
}

// AuditPage is a page of events; pass nextAfter as after to continue.
type AuditPage struct {
	Events    []AuditEvent `json:"events"`
	NextAfter *string      `json:"nextAfter"`
}

// GroupReplay is a group as the coordinator believed it after an event (asOf):
// the log's part of it, without leases or reported progress.
type GroupReplay struct {
	Group
	AsOf        string           `json:"asOf"`
	Members     []MemberMetadata `json:"members"`
	Assignments Assignments      `json:"assignments"`
	Migrations  []Resharding     `json:"migrations"`
}
