package events

import "errors"

// Errors of the codec and of every Log implementation.
var (
	// ErrConflict: an append stated a position that is no longer the log's last entry.
	ErrConflict = errors.New("log position conflict")
	// ErrFenced: the appender's leader term is over (its lease expired or a newer
	// term began); nothing was appended. Only fenced logs return it.
	ErrFenced = errors.New("leader lease lost")
	// ErrCorrupt: an entry's bytes do not decode.
	ErrCorrupt = errors.New("corrupt log entry")
	// ErrUnknownType: an entry names an event type this build does not know.
	ErrUnknownType = errors.New("unknown event type")
	// ErrUnsupportedSchema: an entry was written by a newer schema.
	ErrUnsupportedSchema = errors.New("unsupported event schema")
	// ErrBadID: a stream id is not of the form <ms>-<seq>.
	ErrBadID = errors.New("malformed stream id")
)
