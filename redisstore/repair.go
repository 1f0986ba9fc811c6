package redisstore

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
)

// Repairs. A log entry that quarantines a prefix (or whose envelope cannot be
// read at all) is removed by rewriting the log without it, not by XDEL: the
// rewrite keeps every other entry's id, moves the log before the repair aside
// (nothing is deleted), removes what the coordinator keeps beside the log
// about the entries left out (their history index entries, archived copies),
// and appends a record of the repair (events.LogRepaired) as the repaired
// log's last entry. Snapshots that hold the effect of an entry left out are
// set aside by the caller first (SnapshotStore.SetAside), so the next start
// folds the repaired log from before the first entry left out.
//
// The new log is built under a work key in the log's cluster slot, then one
// MULTI renames the log aside and the work key into its place: a reader sees
// the old log or the repaired one, never a mix. The swap WATCHes the log and
// the leader lease: an append during the copy, or a coordinator taking the
// lease, aborts it (run the repair again).

// RepairPlan says what a repair leaves out of the log.
type RepairPlan struct {
	// Skip are the ids of entries to leave out; each must be in the log.
	Skip []string
	// Through, when set, keeps only the entries up to and including it:
	// every later entry is left out too (a start from the snapshot taken
	// at Through). The trim point is raised to Through: the repaired log is
	// folded from that snapshot, never from zero.
	Through string
	// IgnoreLease repairs even while a coordinator holds the log's leader
	// lease (it must be restarted afterwards: its state still holds what was
	// left out).
	IgnoreLease bool
	// Record builds the data of the entry that records the repair (an
	// encoded events.LogRepaired), from what the repair is about to do.
	Record func(RepairResult) ([]byte, error)
}

// RepairResult is what a repair did.
type RepairResult struct {
	// Skipped are the ids left out, at most events.MaxRepairIDs of them;
	// SkippedCount counts them all.
	Skipped      []string
	SkippedCount int64
	// Kept is how many entries the repaired log kept (the record aside).
	Kept int64
	// PreviousLog is where the log before the repair is kept.
	PreviousLog string
	// LeaseHolder is the coordinator that held the lease ("" when none).
	LeaseHolder string
	// RecordID is the id of the repair's record in the repaired log.
	RecordID string
	// TrimmedTo is the trim point after the repair.
	TrimmedTo string
}

// Errors of a repair.
var (
	// ErrLeaseHeld: a coordinator holds the log's leader lease.
	ErrLeaseHeld = errors.New("a coordinator holds the log's leader lease")
	// ErrNotInLog: an entry to leave out is not in the log.
	ErrNotInLog = errors.New("entry not in the log")
	// ErrLogChanged: the log or its lease changed while the repair copied it.
	ErrLogChanged = errors.New("the log changed during the repair; nothing was swapped")
)

// LeaseHolder is the coordinator that holds the log's leader lease now (""
// when none).
func (l *Log) LeaseHolder(ctx context.Context) (string, error) {
	lease, err := NewLease(l.rdb, l.key, "replay", "")
	if err != nil {
		return "", err
	}
	info, err := lease.Leader(ctx)
	if err != nil {
		return "", err
	}
	return info.Holder, nil
}

// Repair rewrites the log without the entries plan leaves out.
func (l *Log) Repair(ctx context.Context, plan RepairPlan) (RepairResult, error) {
	var res RepairResult
	skip := map[string]bool{}
	var maxSkipped events.ID
	for _, s := range plan.Skip {
		id, err := events.ParseID(s)
		if err != nil {
			return res, fmt.Errorf("--skip %q: %w", s, err)
		}
		skip[id.String()] = true
	}
	var through events.ID
	if plan.Through != "" {
		id, err := events.ParseID(plan.Through)
		if err != nil {
			return res, fmt.Errorf("through %q: %w", plan.Through, err)
		}
		through = id
	}
	if len(skip) == 0 && plan.Through == "" {
		return res, fmt.Errorf("nothing to leave out")
	}
	leaseKey, err := SameSlotKey(l.key, "leader")
	if err != nil {
		return res, err
	}
	work, err := SameSlotKey(l.key, "repair")
	if err != nil {
		return res, err
	}
	holder, err := l.LeaseHolder(ctx)
	if err != nil {
		return res, err
	}
	res.LeaseHolder = holder
	if holder != "" && !plan.IgnoreLease {
		return res, fmt.Errorf("%w (%s): stop it first, or repair anyway with --ignore-lease and restart every coordinator after", ErrLeaseHeld, holder)
	}

	// Where the log stands now.
	info, exists, err := streamInfo(ctx, l.rdb, l.key)
	if err != nil {
		return res, fmt.Errorf("read %s: %w", l.key, err)
	}
	if !exists {
		info = &redis.XInfoStream{LastGeneratedID: events.ZeroID, MaxDeletedEntryID: events.ZeroID}
	}
	if !exists && plan.Through == "" {
		return res, fmt.Errorf("the log %s does not exist", l.key)
	}
	for id := range skip {
		got, err := l.rdb.XRange(ctx, l.key, id, id).Result()
		if err != nil {
			return res, fmt.Errorf("read %s: %w", id, err)
		}
		if len(got) == 0 {
			return res, fmt.Errorf("%w: %s is not in %s (removed already?)", ErrNotInLog, id, l.key)
		}
	}
	last, err := events.ParseID(info.LastGeneratedID)
	if err != nil {
		return res, fmt.Errorf("last id of %s: %w", l.key, err)
	}
	maxDeleted, err := events.ParseID(info.MaxDeletedEntryID)
	if err != nil {
		maxDeleted = events.ID{}
	}
	now, err := l.rdb.Time(ctx).Result()
	if err != nil {
		return res, err
	}
	res.PreviousLog, err = SameSlotKey(l.key, "before-repair:"+strconv.FormatInt(now.UnixMilli(), 10))
	if err != nil {
		return res, err
	}

	// Copy what stays to the work key, with its ids.
	if err := l.rdb.Del(ctx, work).Err(); err != nil {
		return res, err
	}
	pos := events.ZeroID
	for exists {
		msgs, err := l.rdb.XRangeN(ctx, l.key, "("+pos, "+", trimPage).Result()
		if err != nil {
			return res, fmt.Errorf("read %s after %s: %w", l.key, pos, err)
		}
		if len(msgs) == 0 {
			break
		}
		pipe := l.rdb.Pipeline()
		adds := 0
		for _, e := range toEntries(msgs) {
			id, _ := events.ParseID(e.ID)
			if skip[e.ID] || (plan.Through != "" && through.Less(id)) {
				res.SkippedCount++
				if len(res.Skipped) < events.MaxRepairIDs {
					res.Skipped = append(res.Skipped, e.ID)
				}
				if maxSkipped.Less(id) {
					maxSkipped = id
				}
				continue
			}
			pipe.XAdd(ctx, &redis.XAddArgs{Stream: work, ID: e.ID, Values: []any{entryField, e.Data}})
			adds++
		}
		if adds > 0 {
			if _, err := pipe.Exec(ctx); err != nil {
				return res, fmt.Errorf("copy %s to %s: %w", l.key, work, err)
			}
		}
		res.Kept += int64(adds)
		pos = msgs[len(msgs)-1].ID
	}
	if maxDeleted.Less(maxSkipped) {
		maxDeleted = maxSkipped
	}

	// The trim point: raised to Through (the log is folded from the snapshot
	// taken there).
	trimmedTo, err := l.TrimmedTo(ctx)
	if err != nil {
		return res, err
	}
	res.TrimmedTo = trimmedTo
	if plan.Through != "" {
		if cur, _ := events.ParseID(trimmedTo); cur.Less(through) {
			res.TrimmedTo = through.String()
		}
	}

	// The record, after the old log's last id: ids are never given twice.
	data, err := plan.Record(res)
	if err != nil {
		return res, err
	}
	if res.Kept > 0 {
		if last != (events.ID{}) {
			if err := l.rdb.Do(ctx, "XSETID", work, last.String()).Err(); err != nil {
				return res, fmt.Errorf("set the last id of %s: %w", work, err)
			}
		}
		res.RecordID, err = l.rdb.XAdd(ctx, &redis.XAddArgs{Stream: work, Values: []any{entryField, data}}).Result()
	} else {
		id := "*"
		if last != (events.ID{}) {
			id = events.ID{Ms: last.Ms, Seq: last.Seq + 1}.String()
		}
		res.RecordID, err = l.rdb.XAdd(ctx, &redis.XAddArgs{Stream: work, ID: id, Values: []any{entryField, data}}).Result()
	}
	if err != nil {
		return res, fmt.Errorf("record the repair in %s: %w", work, err)
	}
	// XINFO of the repaired log says what was ever added and deleted.
	added := info.EntriesAdded + 1
	if added < res.Kept+1 {
		added = res.Kept + 1
	}
	if err := l.rdb.Do(ctx, "XSETID", work, res.RecordID, "ENTRIESADDED", added, "MAXDELETEDID", maxDeleted.String()).Err(); err != nil {
		return res, fmt.Errorf("set the counters of %s: %w", work, err)
	}

	// Swap, unless the log or its lease moved meanwhile.
	err = l.rdb.Watch(ctx, func(tx *redis.Tx) error {
		cur, found, err := streamInfo(ctx, tx, l.key)
		switch {
		case err != nil:
			return err
		case !found:
			if exists {
				return fmt.Errorf("%w: %s is gone", ErrLogChanged, l.key)
			}
		case !exists || cur.LastGeneratedID != info.LastGeneratedID:
			return fmt.Errorf("%w: %s is at %s now", ErrLogChanged, l.key, cur.LastGeneratedID)
		}
		if !plan.IgnoreLease {
			// Read after the WATCH: a coordinator that takes the lease
			// from now on aborts the swap.
			live, err := l.LeaseHolder(ctx)
			if err != nil {
				return err
			}
			if live != "" {
				return fmt.Errorf("%w (%s)", ErrLeaseHeld, live)
			}
		}
		_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if exists {
				p.Rename(ctx, l.key, res.PreviousLog)
			}
			p.Rename(ctx, work, l.key)
			if res.TrimmedTo != trimmedTo {
				p.HSet(ctx, l.TrimKey(), "to", res.TrimmedTo)
			}
			return nil
		})
		return err
	}, l.key, leaseKey, l.TrimKey())
	if errors.Is(err, redis.TxFailedErr) {
		err = ErrLogChanged
	}
	if err != nil {
		_ = l.rdb.Del(ctx, work).Err()
		return res, fmt.Errorf("swap the repaired log in: %w", err)
	}

	// What the coordinator keeps beside the log about the entries left out.
	if err := l.forget(ctx, plan.Skip, plan.Through); err != nil {
		return res, fmt.Errorf("the log is repaired, but: %w", err)
	}
	return res, nil
}

// forget removes the history index entries and the archived copies of the
// entries a repair left out: the ids in skip, and every id after through.
func (l *Log) forget(ctx context.Context, skip []string, through string) error {
	names, err := l.index.names(ctx)
	if err != nil {
		return err
	}
	streams := []string{l.ArchiveKey()}
	for _, name := range names {
		streams = append(streams, l.index.stream(false, name), l.index.stream(true, name))
	}
	var ids []string
	for _, s := range skip {
		if id, err := events.ParseID(s); err == nil {
			ids = append(ids, id.String())
		}
	}
	for _, key := range streams {
		drop := ids
		if through != "" {
			after, err := l.rdb.XRange(ctx, key, "("+through, "+").Result()
			if err != nil {
				return fmt.Errorf("read %s: %w", key, err)
			}
			drop = append([]string(nil), ids...)
			for _, m := range after {
				drop = append(drop, m.ID)
			}
		}
		if len(drop) == 0 {
			continue
		}
		if err := l.rdb.XDel(ctx, key, drop...).Err(); err != nil {
			return fmt.Errorf("remove the entries left out from %s: %w", key, err)
		}
	}
	return nil
}
