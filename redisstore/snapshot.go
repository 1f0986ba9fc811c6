package redisstore

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"

	"github.com/rscoord/rsc/events"
)

// DefaultSnapshotKeep is how many snapshots a store keeps unless told otherwise.
const DefaultSnapshotKeep = 2

// SnapshotStore keeps the newest few projection snapshots next to the log. The
// newest is the string "<log stream>:snapshot", where a single snapshot always
// was, so tools that read only the newest keep working. The last ids of the
// kept snapshots, newest first, are the list SameSlotKey(newest, "ids"), and
// each older one is the string SameSlotKey(newest, <its last id>): all of them
// share the newest's hash slot, so one transaction can rotate them on a Redis
// Cluster too (a log key with a '}' outside a hash tag gets plain suffixes
// instead, which work on one server only).
type SnapshotStore struct {
	rdb redis.UniversalClient
	key string
	ids string
}

// NewSnapshotStore stores snapshots of the log at logKey.
func NewSnapshotStore(rdb redis.UniversalClient, logKey string) *SnapshotStore {
	if logKey == "" {
		logKey = DefaultLogStream
	}
	s := &SnapshotStore{rdb: rdb, key: logKey + ":snapshot"}
	s.ids = s.sideKey("ids")
	return s
}

// sideKey names a key of the store next to the newest, in its hash slot when
// the name allows it.
func (s *SnapshotStore) sideKey(suffix string) string {
	k, err := SameSlotKey(s.key, suffix)
	if err != nil {
		return s.key + ":" + suffix
	}
	return k
}

// Key is where the newest snapshot lives.
func (s *SnapshotStore) Key() string { return s.key }

// IDsKey is the list of the kept snapshots' last ids, newest first.
func (s *SnapshotStore) IDsKey() string { return s.ids }

// olderKey is where the kept snapshot taken after id lives once a newer one
// replaced it as the newest.
func (s *SnapshotStore) olderKey(id string) string { return s.sideKey(id) }

// Keys lists every key the store holds now (to remove a log with its snapshots).
func (s *SnapshotStore) Keys(ctx context.Context) ([]string, error) {
	ids, err := s.Kept(ctx)
	if err != nil {
		return nil, err
	}
	keys := []string{s.key, s.ids}
	for _, id := range ids[min(1, len(ids)):] {
		keys = append(keys, s.olderKey(id))
	}
	return keys, nil
}

// Load returns the newest snapshot (nil, nil when there is none).
func (s *SnapshotStore) Load(ctx context.Context) ([]byte, error) {
	b, err := s.rdb.Get(ctx, s.key).Bytes()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load snapshot %s: %w", s.key, err)
	}
	return b, nil
}

// Kept lists the last ids of the kept snapshots, newest first. A snapshot
// written by a build that kept only one has no id: Kept is then empty while
// Load returns it.
func (s *SnapshotStore) Kept(ctx context.Context) ([]string, error) {
	ids, err := s.rdb.LRange(ctx, s.ids, 0, -1).Result()
	if err != nil {
		return nil, fmt.Errorf("list snapshots %s: %w", s.ids, err)
	}
	return ids, nil
}

// loadAtScript reads the snapshot taken after ARGV[1] atomically with the
// list: the newest when the list starts with that id, the older key otherwise.
var loadAtScript = redis.NewScript(`
if redis.call('LINDEX', KEYS[2], 0) == ARGV[1] then
  return redis.call('GET', KEYS[1])
end
return redis.call('GET', KEYS[3])
`)

// LoadAt returns the kept snapshot taken after entry lastID (nil, nil when it
// is not kept, or no longer).
func (s *SnapshotStore) LoadAt(ctx context.Context, lastID string) ([]byte, error) {
	id, err := events.ParseID(lastID)
	if err != nil {
		return nil, err
	}
	b, err := loadAtScript.Run(ctx, s.rdb, []string{s.key, s.ids, s.olderKey(id.String())}, id.String()).Text()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("load snapshot at %s from %s: %w", id, s.key, err)
	}
	return []byte(b), nil
}

// Save stores data, the state after entry lastID, as the newest snapshot and
// keeps the newest keep (at least 1), removing older ones. A snapshot that is
// not newer than the newest stored changes nothing and is an events.ErrConflict
// (a replica that lost the lead, or a slow save overtaken by a newer one). The
// rotation is one WATCH/MULTI transaction over keys of one hash slot.
func (s *SnapshotStore) Save(ctx context.Context, lastID string, data []byte, keep int) error {
	id, err := events.ParseID(lastID)
	if err != nil {
		return err
	}
	keep = max(keep, 1)
	err = s.rotate(ctx, func(tx *redis.Tx, kept []string, exists bool) error {
		older := kept
		if len(kept) > 0 {
			newest, err := events.ParseID(kept[0])
			if err != nil {
				return fmt.Errorf("snapshot list %s holds %q: %w", s.ids, kept[0], err)
			}
			if !newest.Less(id) {
				return fmt.Errorf("%w: snapshot after %s is not newer than the stored one after %s", events.ErrConflict, id, newest)
			}
			if !exists {
				older = kept[1:] // the newest was removed by hand
			}
		}
		next := append([]string{id.String()}, older...)
		drop := next[min(keep, len(next)):]
		next = next[:min(keep, len(next))]
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			if len(older) > 0 && len(kept) > 0 && older[0] == kept[0] && keep > 1 {
				p.Rename(ctx, s.key, s.olderKey(kept[0]))
			}
			p.Set(ctx, s.key, data, 0)
			p.Del(ctx, s.ids)
			p.RPush(ctx, s.ids, toAny(next)...)
			for _, d := range drop {
				p.Del(ctx, s.olderKey(d))
			}
			return nil
		})
		return err
	})
	if err == nil || errors.Is(err, events.ErrConflict) && !errors.Is(err, errListChanging) {
		return err // a snapshot not newer than the stored one: as it is
	}
	return fmt.Errorf("save snapshot %s: %w", s.key, err)
}

// errListChanging is rotate's answer when other writers changed the snapshot
// list under every try.
var errListChanging = fmt.Errorf("%w: the snapshot list kept changing", events.ErrConflict)

// rotate runs fn in a WATCH transaction over the snapshot list and the
// newest snapshot, with the ids the list keeps and whether the newest
// exists, and again while other writers change them: errListChanging after
// ten tries.
func (s *SnapshotStore) rotate(ctx context.Context, fn func(tx *redis.Tx, kept []string, newest bool) error) error {
	for attempt := 0; attempt < 10; attempt++ {
		err := s.rdb.Watch(ctx, func(tx *redis.Tx) error {
			kept, err := tx.LRange(ctx, s.ids, 0, -1).Result()
			if err != nil {
				return err
			}
			n, err := tx.Exists(ctx, s.key).Result()
			if err != nil {
				return err
			}
			return fn(tx, kept, n == 1)
		}, s.key, s.ids)
		if !errors.Is(err, redis.TxFailedErr) {
			return err
		}
	}
	return errListChanging
}

func toAny(ss []string) []any {
	out := make([]any, len(ss))
	for i, s := range ss {
		out[i] = s
	}
	return out
}

// SetAside moves the kept snapshots that drop selects (by the last id they
// were taken at) out of the store, to SameSlotKey(newest, "set-aside:<tag>:<id>"),
// and keeps the others, the newest of them where the newest lives: a repair
// sets aside the snapshots that hold what it left out of the log, so the next
// start folds the repaired log from before it. Nothing is deleted. A
// snapshot written by a build that kept only one has no id in the list: give
// its id (legacyID, read from the snapshot itself) to have it considered. It
// returns the ids set aside, newest first.
func (s *SnapshotStore) SetAside(ctx context.Context, drop func(lastID string) bool, legacyID, tag string) ([]string, error) {
	var gone []string
	err := s.rotate(ctx, func(tx *redis.Tx, kept []string, newest bool) error {
		gone = nil
		legacy := len(kept) == 0 && newest && legacyID != ""
		if legacy {
			kept = []string{legacyID}
		}
		var stay []string
		keyOf := func(i int, id string) string {
			if i == 0 && newest {
				return s.key
			}
			return s.olderKey(id)
		}
		type move struct{ from, to string }
		var moves []move
		for i, id := range kept {
			if !drop(id) {
				stay = append(stay, id)
				continue
			}
			gone = append(gone, id)
			from := keyOf(i, id)
			if n, err := tx.Exists(ctx, from).Result(); err != nil {
				return err
			} else if n == 1 {
				moves = append(moves, move{from, s.sideKey("set-aside:" + tag + ":" + id)})
			}
		}
		if len(gone) == 0 {
			return nil
		}
		// The newest kept one moves where the newest lives.
		if len(stay) > 0 && len(kept) > 0 && stay[0] != kept[0] {
			if n, err := tx.Exists(ctx, s.olderKey(stay[0])).Result(); err != nil {
				return err
			} else if n == 1 {
				moves = append(moves, move{s.olderKey(stay[0]), s.key})
			}
		}
		_, err := tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
			for _, m := range moves {
				p.Rename(ctx, m.from, m.to)
			}
			p.Del(ctx, s.ids)
			if !legacy && len(stay) > 0 {
				p.RPush(ctx, s.ids, toAny(stay)...)
			}
			return nil
		})
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("set snapshots of %s aside: %w", s.key, err)
	}
	return gone, nil
}
