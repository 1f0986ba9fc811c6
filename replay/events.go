package replay

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"strings"
	"time"

	"github.com/rscoord/rsc/events"
)

// Filter selects log entries for Events. Zero fields select everything.
type Filter struct {
	// StreamPrefix and ConsumerGroup keep the events of matching groups; each
	// applies on its own when set.
	StreamPrefix  string
	ConsumerGroup string
	// Types keeps events of these types: exact names ("resharding.draining") or a
	// namespace ("resharding.*"). A name no registered type matches is an error.
	Types []string
	// FromID and ToID bound the entry ids, both inclusive.
	FromID, ToID string
	// Since and Until bound the envelope (decision) time, both inclusive.
	Since, Until time.Time
}

// EventRecord is one decoded log entry, ready to print as JSON.
type EventRecord struct {
	ID            string    `json:"id"`
	Type          string    `json:"type"`
	Time          time.Time `json:"time"`
	StreamPrefix  string    `json:"streamPrefix"`
	ConsumerGroup string    `json:"consumerGroup"`
	Actor         string    `json:"actor"`
	RequestID     string    `json:"requestId"`
	// Event is the event struct (*events.GroupCreated, ...).
	Event events.Event `json:"-"`
	// Payload is Event as JSON, under the event's pinned field names (null
	// for an entry that is Unreadable).
	Payload json.RawMessage `json:"payload"`
	// Unreadable says why the entry's event cannot be read although its
	// envelope names a stream prefix (it quarantines that prefix; see
	// events.Confine); "" for every readable entry.
	Unreadable string `json:"unreadable,omitempty"`
}

// NewEventRecord renders a decoded record.
func NewEventRecord(rec events.Record) (EventRecord, error) {
	if q, ok := rec.Event.(*events.Quarantined); ok {
		return EventRecord{
			ID: rec.ID, Type: rec.Type, Time: rec.Time.UTC(),
			StreamPrefix: rec.StreamPrefix, ConsumerGroup: rec.ConsumerGroup,
			Actor: rec.Actor, RequestID: rec.RequestID, Event: rec.Event, Payload: json.RawMessage("null"), Unreadable: q.Reason,
		}, nil
	}
	p, err := payloadJSON(rec.Event)
	if err != nil {
		return EventRecord{}, fmt.Errorf("log entry %s: %w", rec.ID, err)
	}
	return EventRecord{
		ID: rec.ID, Type: rec.Type, Time: rec.Time.UTC(),
		StreamPrefix: rec.StreamPrefix, ConsumerGroup: rec.ConsumerGroup,
		Actor: rec.Actor, RequestID: rec.RequestID, Event: rec.Event, Payload: p,
	}, nil
}

// Events iterates the entries of the log that match f, decoded, in log order.
// The log is read up to its last entry at the time iteration starts. An entry
// whose event cannot be read but whose envelope names a stream prefix is
// yielded as Unreadable; an entry whose envelope cannot be read ends the
// iteration with an error naming its id (whether or not it would have
// matched: its type and group are unknown); an invalid
// filter ends it at once with ErrInvalidArgument. After an error the iterator
// yields nothing more.
func Events(ctx context.Context, log events.Log, f Filter) iter.Seq2[EventRecord, error] {
	return func(yield func(EventRecord, error) bool) {
		m, err := f.compile()
		if err != nil {
			yield(EventRecord{}, err)
			return
		}
		end, err := log.LastID(ctx)
		if err != nil {
			yield(EventRecord{}, fmt.Errorf("last id of log: %w", err))
			return
		}
		if m.to != nil {
			if last, err := events.ParseID(end); err == nil && m.to.Less(last) {
				end = m.to.String()
			}
		}
		err = scan(ctx, log, m.after, end, func(e events.Entry) (bool, error) {
			rec, err := events.Decode(e.ID, e.Data)
			if err != nil {
				q, confined := events.Confine(err)
				if !confined {
					return false, err
				}
				rec = q
			}
			if !m.match(rec) {
				return true, nil
			}
			r, err := NewEventRecord(rec)
			if err != nil {
				return false, err
			}
			return yield(r, nil), nil
		})
		if err != nil {
			yield(EventRecord{}, err)
		}
	}
}

// matcher is a checked Filter.
type matcher struct {
	f     Filter
	after string     // read after this id
	to    *events.ID // last id, when bounded
	exact map[string]bool
	ns    []string // namespace prefixes, with the dot
}

func (f Filter) compile() (*matcher, error) {
	m := &matcher{f: f, after: events.ZeroID, exact: map[string]bool{}}
	var from events.ID
	if f.FromID != "" {
		id, err := parseUserID("from id", f.FromID)
		if err != nil {
			return nil, err
		}
		from = id
		m.after = before(id)
	}
	if f.ToID != "" {
		id, err := parseUserID("to id", f.ToID)
		if err != nil {
			return nil, err
		}
		if f.FromID != "" && id.Less(from) {
			return nil, fmt.Errorf("%w: from id %s is after to id %s", ErrInvalidArgument, f.FromID, f.ToID)
		}
		m.to = &id
	}
	if !f.Since.IsZero() && !f.Until.IsZero() && f.Until.Before(f.Since) {
		return nil, fmt.Errorf("%w: since %s is after until %s", ErrInvalidArgument, f.Since.Format(time.RFC3339Nano), f.Until.Format(time.RFC3339Nano))
	}
	known := events.Types()
	for _, t := range f.Types {
		t = strings.TrimSpace(t)
		if t == "" {
			continue
		}
		if ns, ok := strings.CutSuffix(t, "*"); ok {
			if !strings.HasSuffix(ns, ".") || !anyHasPrefix(known, ns) {
				return nil, fmt.Errorf("%w: event type pattern %q matches no event type (known: %s)", ErrInvalidArgument, t, strings.Join(known, ", "))
			}
			m.ns = append(m.ns, ns)
			continue
		}
		if _, ok := events.New(t); !ok {
			return nil, fmt.Errorf("%w: unknown event type %q (known: %s)", ErrInvalidArgument, t, strings.Join(known, ", "))
		}
		m.exact[t] = true
	}
	return m, nil
}

func (m *matcher) match(rec events.Record) bool {
	f := m.f
	if f.StreamPrefix != "" && rec.StreamPrefix != f.StreamPrefix {
		return false
	}
	if f.ConsumerGroup != "" && rec.ConsumerGroup != f.ConsumerGroup {
		return false
	}
	if !f.Since.IsZero() && rec.Time.Before(f.Since) {
		return false
	}
	if !f.Until.IsZero() && rec.Time.After(f.Until) {
		return false
	}
	if len(m.exact) == 0 && len(m.ns) == 0 {
		return true
	}
	if m.exact[rec.Type] {
		return true
	}
	for _, ns := range m.ns {
		if strings.HasPrefix(rec.Type, ns) {
			return true
		}
	}
	return false
}

// before is the greatest id below id, so that reading after it starts at id.
func before(id events.ID) string {
	switch {
	case id.Seq > 0:
		return events.ID{Ms: id.Ms, Seq: id.Seq - 1}.String()
	case id.Ms > 0:
		return events.ID{Ms: id.Ms - 1, Seq: ^uint64(0)}.String()
	}
	return events.ZeroID
}

func anyHasPrefix(s []string, prefix string) bool {
	for _, x := range s {
		if strings.HasPrefix(x, prefix) {
			return true
		}
	}
	return false
}
