package events

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"
)

// ZeroID is the position of an empty log: "nothing applied yet".
const ZeroID = "0-0"

// Entry is one raw log entry: its stream id and the encoded envelope.
type Entry struct {
	ID   string
	Data []byte
}

// Log is the coordinator's append-only event log. Implementations: MemLog here,
// redisstore.Log on a Redis Stream. Both pass the suite in events/eventstest.
type Log interface {
	// Append writes a batch after position after (the id of the last entry the
	// caller's decision was based on; ZeroID for an empty log). The batch lands
	// whole, or not at all with ErrConflict when after is not the log's last id.
	Append(ctx context.Context, after string, batch [][]byte) ([]string, error)
	// Read returns up to count entries with ids greater than after, in order.
	Read(ctx context.Context, after string, count int) ([]Entry, error)
	// Tail is Read that waits up to block for an entry when none is there yet.
	Tail(ctx context.Context, after string, count int, block time.Duration) ([]Entry, error)
	// Get returns the entries with the given ids, skipping ids that do not exist.
	Get(ctx context.Context, ids []string) ([]Entry, error)
	// LastID is the id of the last entry ever appended (ZeroID when none).
	LastID(ctx context.Context) (string, error)
	// Len is the number of entries the log holds.
	Len(ctx context.Context) (int64, error)
}

// ID is a parsed stream id.
type ID struct{ Ms, Seq uint64 }

// ParseID parses "<ms>-<seq>" (or "<ms>", meaning seq 0).
func ParseID(s string) (ID, error) {
	if s == "" {
		return ID{}, fmt.Errorf("%w: empty", ErrBadID)
	}
	msPart, seqPart, hasSeq := strings.Cut(s, "-")
	ms, err := strconv.ParseUint(msPart, 10, 64)
	if err != nil {
		return ID{}, fmt.Errorf("%w: %q", ErrBadID, s)
	}
	var seq uint64
	if hasSeq {
		seq, err = strconv.ParseUint(seqPart, 10, 64)
		if err != nil {
			return ID{}, fmt.Errorf("%w: %q", ErrBadID, s)
		}
	}
	return ID{ms, seq}, nil
}

func (id ID) String() string {
	var buf [41]byte
	return string(id.Append(buf[:0]))
}

// IsIDText reports whether s, which ParseID reads, is the text String gives
// its id (both parts, neither with a leading zero), as Redis writes ids: a
// caller holding s need not make that text again.
func IsIDText(s string) bool {
	ms, seq, ok := strings.Cut(s, "-")
	plain := func(part string) bool { return part == "0" || part != "" && part[0] != '0' }
	return ok && plain(ms) && plain(seq)
}

// Append appends the id's text (String) to b.
func (id ID) Append(b []byte) []byte {
	b = strconv.AppendUint(b, id.Ms, 10)
	b = append(b, '-')
	return strconv.AppendUint(b, id.Seq, 10)
}

// Less orders ids as Redis does.
func (id ID) Less(o ID) bool { return id.Ms < o.Ms || (id.Ms == o.Ms && id.Seq < o.Seq) }

// CompareIDs returns -1, 0 or 1. Malformed ids compare as errors.
func CompareIDs(a, b string) (int, error) {
	ia, err := ParseID(a)
	if err != nil {
		return 0, err
	}
	ib, err := ParseID(b)
	if err != nil {
		return 0, err
	}
	switch {
	case ia.Less(ib):
		return -1, nil
	case ib.Less(ia):
		return 1, nil
	}
	return 0, nil
}

func sortStrings(s []string) { sort.Strings(s) }

// Draft is an entry to append with the group history index it belongs to.
type Draft struct {
	Data []byte
	// Index names the group's history index (IndexName); "" for an entry of
	// no group.
	Index string
	// Membership marks member.* and assignment.* entries (Membership): a log
	// trimmed at its head drops them from the index with the entries.
	Membership bool
}

// Indexed is a Log that keeps a history index per group beside it, written
// atomically with every append, so a group's audit history pages in time
// proportional to the page, whatever the length of the log.
type Indexed interface {
	Log
	// AppendIndexed is Append that also adds every drafted entry's id to its
	// group's index.
	AppendIndexed(ctx context.Context, after string, batch []Draft) ([]string, error)
	// History returns up to limit ids of the index's entries after after, in
	// order.
	History(ctx context.Context, index, after string, limit int) ([]string, error)
}

// Restorable is a Log that records restores (LogRestored): it appends a
// restore's entry under the id the caller chose, so that its snapshot is
// stored under that id before the entry lands (the log never holds a restore
// without its snapshot), and it remembers the last restore.
type Restorable interface {
	// AppendRestore appends one entry, data, with id id: it lands only if
	// after is the log's last id (else ErrConflict) and id is above it, and
	// becomes the log's last restore.
	AppendRestore(ctx context.Context, after, id string, data []byte) error
	// LastRestore is the id of the entry AppendRestore appended last (""
	// when none did; the log may no longer hold it).
	LastRestore(ctx context.Context) (string, error)
}

// IndexName is the history index of a group: its prefix's length, the prefix
// and the group, so that no two groups share one (a prefix may hold ':').
func IndexName(prefix, group string) string {
	return strconv.Itoa(len(prefix)) + ":" + prefix + ":" + group
}

// HistoryIndex is the group history index a record belongs to ("" for
// none: a record of no group, or a refusal naming a group that did not exist)
// and whether it is membership chatter. The writer's appends and the index's
// backfill both follow it.
func HistoryIndex(rec Record) (name string, membership bool) {
	if rec.StreamPrefix == "" && rec.ConsumerGroup == "" {
		return "", false
	}
	if r, ok := rec.Event.(*CommandRejected); ok && r.NoGroup {
		return "", false
	}
	return IndexName(rec.StreamPrefix, rec.ConsumerGroup), Membership(rec.Type)
}

// Membership reports whether an event type is membership chatter (member.*,
// assignment.*) rather than resharding and admin history: trimming drops it.
func Membership(typ string) bool {
	return strings.HasPrefix(typ, "member.") || strings.HasPrefix(typ, "assignment.")
}
