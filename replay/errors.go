package replay

import "errors"

// Errors of this package. Decode failures are *events.DecodeError (they name the
// entry id); failures of the log itself are passed through wrapped.
var (
	// ErrGroupNotFound: the group does not exist at the point asked about (or
	// never appears in the log).
	ErrGroupNotFound = errors.New("group not found")
	// ErrReshardingNotFound: the group has no resharding with that id.
	ErrReshardingNotFound = errors.New("resharding not found")
	// ErrInvalidArgument: a point, range or filter that cannot be answered as asked.
	ErrInvalidArgument = errors.New("invalid argument")
	// ErrBadFile: an export file that cannot be imported.
	ErrBadFile = errors.New("bad export file")
	// ErrTrimmed: the point asked about is before the oldest kept snapshot of a
	// log trimmed at its head (TrimmedLog), so its state can no longer be folded.
	ErrTrimmed = errors.New("log trimmed")
)
