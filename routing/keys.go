package routing

import (
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxNameLength is the maximum length, in bytes, of a stream prefix or a
// consumer group name accepted by [ValidatePrefix] and [ValidateName].
const MaxNameLength = 200

// shardIndexPlaceholder is the literal placeholder used in [KeyPattern].
const shardIndexPlaceholder = "{shardIndex}"

// StreamKey returns the physical Redis stream key of shard index of the
// stream with the given prefix: prefix + ":" + the decimal index, with no
// padding. It does not validate its arguments; see [ValidatePrefix].
func StreamKey(prefix string, index int) string {
	return prefix + ":" + strconv.Itoa(index)
}

// KeyPattern returns the streamKeyPattern of routing responses:
// prefix + ":{shardIndex}", where "{shardIndex}" is the literal text.
func KeyPattern(prefix string) string {
	return prefix + ":" + shardIndexPlaceholder
}

// nameError is returned by ValidateName and ValidatePrefix. Its message
// names the field (kind) and, for a forbidden character, the character; it
// unwraps to one of the sentinel errors.
type nameError struct {
	kind   string
	err    error // one of ErrBlank, ErrTooLong, ErrHashTagBraces, ErrInvalidUTF8, ErrForbiddenChar
	char   rune  // the offending character, for ErrForbiddenChar
	length int   // the byte length, for ErrTooLong
}

func (e *nameError) Error() string {
	switch e.err {
	case ErrForbiddenChar:
		return e.kind + " must not contain " + strconv.QuoteRune(e.char)
	case ErrTooLong:
		return e.kind + " must not be longer than " + strconv.Itoa(MaxNameLength) +
			" bytes (got " + strconv.Itoa(e.length) + ")"
	default:
		return e.kind + " " + e.err.Error()
	}
}

func (e *nameError) Unwrap() error { return e.err }

// ValidatePrefix reports whether prefix is an acceptable stream prefix. It
// is ValidateName("streamPrefix", prefix); see [ValidateName] for the rules.
// A nil error means [StreamKey] and [KeyPattern] produce keys that cannot
// carry a Redis Cluster hash tag or a key-pattern wildcard.
func ValidatePrefix(prefix string) error {
	return ValidateName("streamPrefix", prefix)
}

// ValidateName validates a stream prefix or consumer group name; kind is the
// field name used in the error message (e.g. "streamPrefix",
// "consumerGroup"). Member ids are not subject to these rules.
//
// The checks, in order, and the sentinel each returned error wraps:
//
//   - blank (empty after strings.TrimSpace): [ErrBlank],
//     message "<kind> must not be blank";
//   - longer than [MaxNameLength] bytes: [ErrTooLong];
//   - contains '{' or '}': [ErrHashTagBraces], message
//     "<kind> must not contain Redis Cluster hash tag braces";
//   - not valid UTF-8: [ErrInvalidUTF8], message "<kind> must be valid UTF-8";
//   - contains a control character (< 0x20 or 0x7f), a Unicode white space
//     character, a Unicode format character (category Cf: zero-width
//     characters, bidirectional controls, the byte-order mark), or one of
//     the glob characters '*', '?', '[', ']': [ErrForbiddenChar], message
//     naming the first such character, e.g. "<kind> must not contain '*'".
//
// The blank and brace rules are those of the reference server; the others
// are stricter, to rule out key-pattern injection and names that look like
// another name in a log line or a console (a format character is invisible
// or reorders the text around it).
func ValidateName(kind, value string) error {
	if strings.TrimSpace(value) == "" {
		return &nameError{kind: kind, err: ErrBlank}
	}
	if len(value) > MaxNameLength {
		return &nameError{kind: kind, err: ErrTooLong, length: len(value)}
	}
	if strings.ContainsAny(value, "{}") {
		return &nameError{kind: kind, err: ErrHashTagBraces}
	}
	if !utf8.ValidString(value) {
		return &nameError{kind: kind, err: ErrInvalidUTF8}
	}
	for _, r := range value {
		if forbidden(r) {
			return &nameError{kind: kind, err: ErrForbiddenChar, char: r}
		}
	}
	return nil
}

// forbidden reports whether r may not appear in a prefix or group name
// (braces are checked separately).
func forbidden(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f:
		return true
	case r == '*', r == '?', r == '[', r == ']':
		return true
	case unicode.IsSpace(r), unicode.Is(unicode.Cf, r):
		return true
	}
	return false
}
