package events

import "errors"

// One bad entry hurts one prefix. An entry whose envelope decodes but whose
// event does not (an event type this build does not know, a newer schema, a
// payload that does not decode, or numbers out of bounds) still says which
// stream prefix it belongs to: the fold quarantines that prefix with it
// instead of stopping, and every other prefix goes on being served. Only an
// entry whose envelope cannot be read, or that names no prefix, stops the
// fold: nothing confines it.

// Quarantined stands, in a Record the fold makes (Confine), for an entry
// whose event could not be read. It is never written to the log and is not
// registered: folding it quarantines the record's stream prefix
// (projection).
type Quarantined struct {
	// Reason says why the entry's event could not be read.
	Reason string
}

// EventType is "": a Quarantined is no event of the log (the Record's Type
// is the type the entry names).
func (Quarantined) EventType() string { return "" }

// Confine turns an error of Decode into the Record that quarantines its
// entry's stream prefix, when the error is confined to one: the envelope was
// read (DecodeError.Meta) and names a prefix. It reports false for any other
// error.
func Confine(err error) (Record, bool) {
	var de *DecodeError
	if !errors.As(err, &de) || de.Meta == nil || de.Meta.StreamPrefix == "" {
		return Record{}, false
	}
	return Record{ID: de.ID, Type: de.Type, Meta: *de.Meta, Event: &Quarantined{Reason: de.Err.Error()}}, true
}
