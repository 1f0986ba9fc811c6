package routing

import "errors"

// Sentinel errors. Errors returned by [ValidatePrefix] and [ValidateName]
// wrap one of ErrBlank, ErrTooLong, ErrHashTagBraces, ErrInvalidUTF8 or
// ErrForbiddenChar
// (test with errors.Is); their messages are prefixed with the field name,
// e.g. "streamPrefix must not be blank". [RouteV1] and [RouteKey] return
// ErrNoShards and ErrTooManyShards unwrapped.
var (
	// ErrBlank: the name is empty or only white space.
	ErrBlank = errors.New("must not be blank")
	// ErrTooLong: the name is longer than MaxNameLength bytes.
	ErrTooLong = errors.New("must not be longer than 200 bytes")
	// ErrHashTagBraces: the name contains '{' or '}', which would form a
	// Redis Cluster hash tag in the stream keys.
	ErrHashTagBraces = errors.New("must not contain Redis Cluster hash tag braces")
	// ErrInvalidUTF8: the name is not valid UTF-8. A name is a Redis key
	// and comes back in JSON answers, which can only carry UTF-8: two
	// invalid names would read the same (U+FFFD), and neither as the key.
	ErrInvalidUTF8 = errors.New("must be valid UTF-8")
	// ErrForbiddenChar: the name contains a control character, white
	// space, a Unicode format character (category Cf), or a glob character
	// ('*', '?', '[', ']').
	ErrForbiddenChar = errors.New("must not contain a forbidden character")

	// ErrNoShards: routing was asked for with shardCount <= 0.
	ErrNoShards = errors.New("routing: shardCount must be positive")
	// ErrTooManyShards: routing was asked for with shardCount > 2^32,
	// for which routeV1 is undefined (it would never terminate).
	ErrTooManyShards = errors.New("routing: shardCount must not exceed 2^32")
)
