package commands

import (
	"fmt"
	"unicode"
	"unicode/utf8"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/routing"
)

// Every string a caller sends that can reach an event, the history index or
// monitoring is bounded here, so a request can never make the log (or memory)
// grow by more than a small, fixed amount.
const (
	// MaxTextBytes bounds free text: requestId, memberName, requestedBy, reason,
	// a progress report's streamKey and revoke report's ackedAt.
	MaxTextBytes = 256
	// maxStreamIDBytes bounds a reported stream id ("<ms>-<seq>" is at most 41).
	maxStreamIDBytes = 41
)

// checkText returns a problem ("field: ...") when s is longer than MaxTextBytes
// or holds control characters, Unicode format characters (category Cf:
// zero-width characters and bidirectional controls, which hide or reorder
// text in a log line or a console) or invalid UTF-8, or "" when s is acceptable.
func checkText(field, s string) string {
	if len(s) > MaxTextBytes {
		return fmt.Sprintf("%s: must not be longer than %d bytes (got %d)", field, MaxTextBytes, len(s))
	}
	if !utf8.ValidString(s) {
		return field + ": must be valid UTF-8"
	}
	for _, r := range s {
		if r < 0x20 || r == 0x7f {
			return field + ": must not contain control characters"
		}
		if unicode.Is(unicode.Cf, r) {
			return fmt.Sprintf("%s: must not contain Unicode format characters (found U+%04X)", field, r)
		}
	}
	return ""
}

// checkMemberID validates a member id like a group name: it becomes a Redis
// consumer name and a key in the log.
func checkMemberID(field, id string) string {
	if err := routing.ValidateName(field, id); err != nil {
		return err.Error()
	}
	return ""
}

// checkStreamID returns a problem when s is not a stream id ("<ms>-<seq>").
func checkStreamID(field, s string) string {
	if len(s) > maxStreamIDBytes {
		return fmt.Sprintf("%s: must be a stream id like 1700000000000-0", field)
	}
	if _, err := events.ParseID(s); err != nil {
		return fmt.Sprintf("%s: must be a stream id like 1700000000000-0", field)
	}
	return ""
}

// appendProblem adds p to problems when it is not "".
func appendProblem(problems []string, p string) []string {
	if p == "" {
		return problems
	}
	return append(problems, p)
}

// truncate cuts s to at most n bytes on a rune boundary (for values recorded
// in the audit trail of a refused command, which must be recorded even when
// they are what was wrong).
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8.RuneStart(s[n]) {
		n--
	}
	return s[:n]
}
