package replay

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"strings"

	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
)

// VerifyResult is the outcome of Verify.
type VerifyResult struct {
	// Entries is how many entries the fold from zero applied; LastID the last one.
	Entries int    `json:"entries"`
	LastID  string `json:"lastId"`
	// Digest is the SHA-256 of the canonical projection encoding after the full fold, to
	// compare runs on different machines or copies of the log.
	Digest string `json:"digest"`
	// Match: every check passed.
	Match bool `json:"match"`
	// TrimmedTo and FromSnapshot are set for a log trimmed at its head: it
	// cannot be folded from zero, so the "full" fold starts from the kept
	// snapshot at FromSnapshot (Entries counts the entries after it).
	TrimmedTo    string `json:"trimmedTo,omitempty"`
	FromSnapshot string `json:"fromSnapshot,omitempty"`
	// Quarantining lists every entry whose event cannot be read although its
	// envelope names a stream prefix: each quarantines its prefix (the
	// coordinator answers 409 COORDINATOR_METADATA_CORRUPT for it and serves
	// every other prefix) until a repair leaves it out of the log.
	Quarantining []QuarantiningEntry `json:"quarantining"`
	// Snapshot is the snapshot check; nil when no snapshot was given.
	Snapshot *SnapshotCheck `json:"snapshot"`
	// Problems says, in words, what did not match.
	Problems []string `json:"problems"`
}

// QuarantiningEntry is an entry that quarantines its stream prefix.
type QuarantiningEntry struct {
	ID           string `json:"id"`
	StreamPrefix string `json:"streamPrefix"`
	Type         string `json:"type"`
	Reason       string `json:"reason"`
}

// SnapshotCheck compares a snapshot plus the log after it with the full fold.
type SnapshotCheck struct {
	// LastID is the entry the snapshot was taken after.
	LastID string `json:"lastId,omitempty"`
	// TailEntries is how many entries were folded on top of the snapshot.
	TailEntries int  `json:"tailEntries"`
	Match       bool `json:"match"`
	// Error is set when the snapshot cannot be restored at all.
	Error string `json:"error,omitempty"`
	// Differences lists the groups whose state or history differ.
	Differences []GroupDifference `json:"differences"`
}

// GroupDifference names a group that differs between the two folds and how.
type GroupDifference struct {
	StreamPrefix  string `json:"streamPrefix"`
	ConsumerGroup string `json:"consumerGroup"`
	What          string `json:"what"`
}

// Verify folds the whole log from zero and checks that its encoding
// (projection.State.Encode) restores to the same bytes; given a snapshot, it
// also restores the snapshot, folds the log after it, and compares the two
// encodings byte for byte, naming the groups that differ. Encodings are
// compared in canonical form (see CanonicalEncode): same content, map entries
// sorted. A mismatch is a result (Match false), not an error, and so is an
// entry that quarantines its prefix (Quarantining names each); an entry
// whose envelope cannot be read is an error naming its id. The log is read to its last entry
// at the start, so load the snapshot before calling Verify on a live log.
//
// A TrimmedLog cannot be folded from zero: the fold starts from its base
// snapshot (the oldest kept one) and the result says so; the snapshot check
// then compares the given snapshot plus its tail with the base plus its tail.
func Verify(ctx context.Context, log events.Log, snapshot []byte) (*VerifyResult, error) {
	full, err := startFolder(ctx, log)
	if err != nil {
		return nil, err
	}
	keys := map[projection.GroupKey]bool{}
	var keyOrder []projection.GroupKey
	quarantining := []QuarantiningEntry{}
	err = full.fold(ctx, foldOptions{after: func(rec events.Record) {
		if q, ok := rec.Event.(*events.Quarantined); ok {
			quarantining = append(quarantining, QuarantiningEntry{ID: rec.ID, StreamPrefix: rec.StreamPrefix, Type: rec.Type, Reason: q.Reason})
		}
		if k := projection.KeyOf(rec); (k.StreamPrefix != "" || k.ConsumerGroup != "") && !keys[k] {
			keys[k] = true
			keyOrder = append(keyOrder, k)
		}
	}})
	if err != nil {
		return nil, err
	}
	enc, err := CanonicalEncode(full.st)
	if err != nil {
		return nil, err
	}
	sum := sha256.Sum256(enc)
	res := &VerifyResult{Entries: full.n, LastID: full.st.LastID(), Digest: "sha256:" + hex.EncodeToString(sum[:]), Match: true, Quarantining: quarantining, Problems: []string{}}
	fail := func(format string, args ...any) {
		res.Match = false
		res.Problems = append(res.Problems, fmt.Sprintf(format, args...))
	}
	for _, q := range quarantining {
		fail("entry %s (type %q) quarantines stream prefix %q: %s (replay repair --skip %s leaves it out)", q.ID, q.Type, q.StreamPrefix, q.Reason, q.ID)
	}
	trimmed, isTrimmed := log.(*TrimmedLog)
	if isTrimmed {
		res.TrimmedTo, res.FromSnapshot = trimmed.trimmedTo, trimmed.baseID
	}

	// A snapshot of this very state must restore to the same bytes, or no
	// snapshot the coordinator writes can be trusted.
	if raw, err := full.st.Encode(); err != nil {
		return nil, fmt.Errorf("encode projection: %w", err)
	} else if again, err := projection.Restore(raw); err != nil {
		fail("the folded state does not restore from its own encoding: %v", err)
	} else if enc2, err := CanonicalEncode(again); err != nil || !bytes.Equal(enc, enc2) {
		fail("the folded state does not survive a snapshot round trip: restoring its encoding gives different bytes")
	}

	if snapshot == nil {
		return res, nil
	}
	check := &SnapshotCheck{Differences: []GroupDifference{}}
	res.Snapshot = check
	restored, err := projection.Restore(snapshot)
	if err != nil {
		check.Error = err.Error()
		fail("the snapshot cannot be restored: %v (the coordinator would ignore it and fold the whole log)", err)
		return res, nil
	}
	check.LastID = restored.LastID()
	if isTrimmed {
		if c, err := events.CompareIDs(check.LastID, trimmed.trimmedTo); err == nil && c < 0 {
			fail("the snapshot at %s is behind the log's trim point %s: the log no longer holds the entries after it", check.LastID, trimmed.trimmedTo)
		}
	}
	if c, err := events.CompareIDs(check.LastID, full.end); err == nil && c > 0 {
		fail("the snapshot is at %s, after the log's last entry %s: the log was trimmed or the snapshot belongs to another log", check.LastID, full.end)
	}
	tail := &folder{log: log, st: restored, end: full.end}
	if err := tail.fold(ctx, foldOptions{}); err != nil {
		return nil, fmt.Errorf("fold the log after the snapshot (at %s): %w", check.LastID, err)
	}
	check.TailEntries = tail.n
	senc, err := CanonicalEncode(restored)
	if err != nil {
		return nil, fmt.Errorf("projection restored from the snapshot: %w", err)
	}
	check.Match = bytes.Equal(enc, senc)
	if check.Match {
		return res, nil
	}
	check.Differences = compareStates(full.st, restored, keyOrder)
	if len(check.Differences) == 0 {
		fail("snapshot at %s plus %d entries differs from the full fold outside any group's state", check.LastID, tail.n)
	} else {
		var names []string
		for _, d := range check.Differences {
			names = append(names, groupName(projection.GroupKey{StreamPrefix: d.StreamPrefix, ConsumerGroup: d.ConsumerGroup})+" ("+d.What+")")
		}
		fail("snapshot at %s plus %d entries differs from the full fold in %s", check.LastID, tail.n, joinAnd(names))
	}
	return res, nil
}

// compareStates lists the groups whose encoded state or history differ between
// the full fold (a) and the snapshot fold (b). logKeys are the groups the log
// names, in first-seen order; groups only a snapshot knows come after them.
func compareStates(a, b *projection.State, logKeys []projection.GroupKey) []GroupDifference {
	seen := map[projection.GroupKey]bool{}
	var keys []projection.GroupKey
	addKey := func(k projection.GroupKey) {
		if !seen[k] {
			seen[k] = true
			keys = append(keys, k)
		}
	}
	for _, k := range logKeys {
		addKey(k)
	}
	for _, g := range a.Groups() {
		addKey(g.Key)
	}
	for _, g := range b.Groups() {
		addKey(g.Key)
	}
	out := []GroupDifference{}
	for _, k := range keys {
		var what []string
		ga, okA := a.Group(k)
		gb, okB := b.Group(k)
		switch {
		case okA && !okB:
			what = append(what, "missing after the snapshot")
		case !okA && okB:
			what = append(what, "only after the snapshot")
		case okA && okB:
			if !sameEncoding(ga, gb) {
				what = append(what, "state differs")
			}
		}
		if len(what) > 0 {
			out = append(out, GroupDifference{StreamPrefix: k.StreamPrefix, ConsumerGroup: k.ConsumerGroup, What: strings.Join(what, ", ")})
		}
	}
	return out
}

// sameEncoding compares the canonical encodings of two values.
func sameEncoding(a, b any) bool {
	ea, errA := events.Marshal(a)
	eb, errB := events.Marshal(b)
	if errA != nil || errB != nil {
		return false
	}
	ca, errA := canonical(ea)
	cb, errB := canonical(eb)
	return errA == nil && errB == nil && bytes.Equal(ca, cb)
}

// WriteText renders the result for people.
func (r *VerifyResult) WriteText(w io.Writer) error {
	var b strings.Builder
	verdict := "OK"
	if !r.Match {
		verdict = "MISMATCH"
	}
	if r.FromSnapshot != "" {
		fmt.Fprintf(&b, "%s: folded %d entries from the snapshot at %s to %s (%s)\n", verdict, r.Entries, r.FromSnapshot, r.LastID, r.Digest)
		fmt.Fprintf(&b, "the log was trimmed up to %s: it cannot be folded from zero, so the check starts from the oldest kept snapshot\n", r.TrimmedTo)
	} else {
		fmt.Fprintf(&b, "%s: folded %d entries from zero to %s (%s)\n", verdict, r.Entries, r.LastID, r.Digest)
	}
	for _, q := range r.Quarantining {
		fmt.Fprintf(&b, "quarantining: %s %s %q: %s\n", q.ID, q.StreamPrefix, q.Type, q.Reason)
	}
	if s := r.Snapshot; s == nil {
		b.WriteString("snapshot: none checked\n")
	} else if s.Error != "" {
		fmt.Fprintf(&b, "snapshot: unreadable: %s\n", s.Error)
	} else {
		word := "matches"
		if !s.Match {
			word = "DIFFERS from"
		}
		fmt.Fprintf(&b, "snapshot at %s plus %d tail entries %s the full fold\n", s.LastID, s.TailEntries, word)
		for _, d := range s.Differences {
			fmt.Fprintf(&b, "  %s: %s\n", groupName(projection.GroupKey{StreamPrefix: d.StreamPrefix, ConsumerGroup: d.ConsumerGroup}), d.What)
		}
	}
	for _, p := range r.Problems {
		fmt.Fprintf(&b, "problem: %s\n", p)
	}
	_, err := io.WriteString(w, b.String())
	return err
}
