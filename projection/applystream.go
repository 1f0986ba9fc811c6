package projection

import "github.com/rscoord/rsc/events"

// How records change their prefix's Stream (stream.go): the stream events,
// and the group events that provision, retire or recreate shard streams or
// change the layout. Each event type that does registers it here or in the
// apply file of its subject (registerStream); membership never does, so the
// overlay copies a Stream only for those.

func init() {
	registerStream(nil, func(st *Stream, rec events.Record, ev *events.StreamCreated, _ *Group) {
		st.Metadata, st.ShardCount, st.MetadataVersion = true, ev.ShardCount, 1
		st.LayoutSince, st.PreviousLayouts = 1, nil
		st.Origin = events.StreamOriginCreated
		if ev.Group != "" {
			st.Origin = events.StreamOriginGroup
		}
		st.CreatedAt, st.UpdatedAt, st.CreatedBy = rec.Time, rec.Time, ev.RequestedBy
		st.CreatedShards = union(st.CreatedShards, ev.CreatedShards...)
		st.Owner, st.OwnerAnonymous = ev.Principal, ev.Anonymous
	})
	registerStream(nil, func(st *Stream, rec events.Record, ev *events.StreamAdopted, _ *Group) {
		st.Owner, st.OwnerAnonymous = ev.Principal, ev.Anonymous
		st.Metadata, st.ShardCount, st.MetadataVersion = true, ev.ShardCount, 1
		st.LayoutSince, st.PreviousLayouts = 1, nil
		st.Origin = events.StreamOriginAdopted
		st.CreatedAt, st.UpdatedAt, st.CreatedBy = rec.Time, rec.Time, ev.RequestedBy
		// A stream the log says the coordinator created stays its own.
		st.AdoptedShards = union(st.AdoptedShards, without(shardRange(0, ev.ShardCount), st.CreatedShards...)...)
	})
	registerStream(nil, func(st *Stream, rec events.Record, ev *events.StreamScaled, _ *Group) {
		streamLayout(st, ev.To, ev.MetadataVersion, rec)
		st.ShardCount, st.MetadataVersion, st.UpdatedAt = ev.To, ev.MetadataVersion, rec.Time
		st.CreatedShards = union(st.CreatedShards, ev.CreatedShards...)
		st.AdoptedShards = without(st.AdoptedShards, ev.CreatedShards...)
	})
}

// streamFold is how records of one event type change their prefix's Stream:
// touches selects the records that do, fold changes the Stream (the caller's
// own copy) given the record's group before it (nil when none).
type streamFold struct {
	touches func(rec events.Record) bool
	fold    func(st *Stream, rec events.Record, g *Group)
}

// streamFolds holds the stream fold of every event type that has one.
var streamFolds = map[string]streamFold{}

// registerStream adds the stream fold of events of type *T (see
// streamFold); touches nil selects every record of a stream prefix (not a
// global record). Registering a type twice panics.
func registerStream[T any, E interface {
	*T
	events.Event
}](touches func(rec events.Record, ev E) bool, fold func(st *Stream, rec events.Record, ev E, g *Group)) {
	name := E(new(T)).EventType()
	if _, dup := streamFolds[name]; dup {
		panic("projection: two stream folds of event type " + name)
	}
	f := streamFold{
		touches: func(rec events.Record) bool { return rec.StreamPrefix != "" },
		fold:    func(st *Stream, rec events.Record, g *Group) { fold(st, rec, rec.Event.(E), g) },
	}
	if touches != nil {
		f.touches = func(rec events.Record) bool { return touches(rec, rec.Event.(E)) }
	}
	streamFolds[name] = f
}

// touchesStream reports whether a record changes its prefix's Stream.
func touchesStream(rec events.Record) bool {
	f, ok := streamFolds[rec.Event.EventType()]
	return ok && f.touches(rec)
}

// foldStream is the fold of a prefix's Stream: st is the Stream before the
// record (nil when the prefix has none; the caller's own copy, changed in
// place), g the record's group before it (nil when none). It returns the
// Stream after the record. It is called only for records touchesStream
// selects.
func foldStream(st *Stream, rec events.Record, g *Group) *Stream {
	if st == nil {
		st = &Stream{Prefix: rec.StreamPrefix, CreatedAt: rec.Time}
	}
	streamFolds[rec.Event.EventType()].fold(st, rec, g)
	return st
}
