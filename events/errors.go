package events

import "errors"

// Errors of the codec and of every Log implementation.
var (
	// ErrConflict: an append stated a position that is no longer the log's last entry.
	ErrConflict = errors.New("log position conflict")
	// ErrFenced: the appender's leader term is over (its lease expired or a newer
	// term began); nothing was appended. Only fenced logs return it.
	ErrFenced = errors.New("leader lease lost")
	// ErrNotDurable: the entries were written but not acknowledged by as many
	// copies as the log requires (Redis replicas, WAIT): they may be read back
	// now and lost later. The writer answers the decision as failed and folds
	// the entries only when it next reads the log.
	ErrNotDurable = errors.New("append not acknowledged by enough replicas")
	// ErrRefused: the log's store refused the append before writing any of
	// it (Redis out of memory, a read-only replica, a user without the
	// permission, ...): nothing was appended, and nothing of it can land
	// later, unlike an append that failed without an answer.
	ErrRefused = errors.New("append refused; nothing was written")
	// ErrCorrupt: an entry's bytes do not decode.
	ErrCorrupt = errors.New("corrupt log entry")
	// ErrUnknownType: an entry names an event type this build does not know.
	ErrUnknownType = errors.New("unknown event type")
	// ErrOutOfBounds: an entry decodes, but a number in it (a shard count or
	// index) is outside the structural maxima (bounds.go).
	ErrOutOfBounds = errors.New("log entry out of bounds")
	// ErrUnsupportedSchema: an entry was written by a newer schema.
	ErrUnsupportedSchema = errors.New("unsupported event schema")
	// ErrBadID: a stream id is not of the form <ms>-<seq>.
	ErrBadID = errors.New("malformed stream id")
)
