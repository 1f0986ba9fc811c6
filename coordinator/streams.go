package coordinator

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/rscoord/rsc/commands"
	"github.com/rscoord/rsc/events"
	"github.com/rscoord/rsc/projection"
	"github.com/rscoord/rsc/routing"
)

// readKeys reads the TYPE of prefix's shard keys, and of the bare prefix
// key when bare.
func (r *reconciler) readKeys(ctx context.Context, prefix string, shards []int, bare bool) (commands.KeyCheck, error) {
	kc := commands.KeyCheck{Prefix: prefix, Types: map[int]string{}, Fences: map[int]string{}}
	if len(shards) == 0 && !bare {
		return kc, nil
	}
	if r.prov == nil {
		return kc, commands.ErrRedisNotConfigured
	}
	keys := make([]string, 0, 2*len(shards)+1)
	for _, s := range shards {
		keys = append(keys, routing.StreamKey(prefix, s))
	}
	for _, s := range shards {
		keys = append(keys, routing.FenceKey(routing.StreamKey(prefix, s)))
	}
	if bare {
		keys = append(keys, prefix)
	}
	types, err := r.prov.KeyTypes(ctx, keys)
	if err == nil && len(types) != len(keys) {
		err = fmt.Errorf("%d types for %d keys", len(types), len(keys))
	}
	if err != nil {
		return kc, commands.Failed(commands.ErrProvisioningFailed, err, "could not read Redis's keys of stream prefix %s before provisioning", prefix)
	}
	for i, s := range shards {
		kc.Types[s] = types[i]
		kc.Fences[s] = types[len(shards)+i]
	}
	if bare {
		kc.Bare = types[2*len(shards)]
	}
	return kc, nil
}

// CreateStream creates a stream's shard streams, empty and without any
// consumer group, and records its metadata (version 1): refused when the
// stream has metadata, a group uses the prefix, or Redis has any of its keys.
func (s *Service) CreateStream(ctx context.Context, meta events.Meta, in commands.CreateStreamInput) (projection.StreamView, error) {
	k := projection.GroupKey{StreamPrefix: in.StreamPrefix}
	by := commands.OwnerOfCaller(meta.Actor)
	return admin(ctx, s, meta, k, "stream.create", in.RequestedBy, func(meta events.Meta) (projection.StreamView, error) {
		count, err := s.rules.CheckCreateStream(in)
		if err != nil {
			return projection.StreamView{}, err
		}
		prefix := in.StreamPrefix
		if s.rules.Provisioning {
			unlock := s.locks.lock(prefix)
			defer unlock()
		}
		if err := s.committed.peek(func(t *commands.Tx) error { return commands.StreamCreatable(t, prefix, count, by) }); err != nil {
			return projection.StreamView{}, err
		}
		var created []int
		if s.rules.Provisioning {
			var err error
			if created, err = s.rec.createStreams(ctx, prefix, count); err != nil {
				return projection.StreamView{}, err
			}
		}
		return submit(ctx, s.dec, meta, func(t *commands.Tx) (projection.StreamView, error) {
			return commands.CreateStream(t, in, count, by, created)
		})
	})
}

// createStreams creates the shard streams 0..count-1 of a new stream,
// refusing a prefix Redis has any key of (the bare prefix or a shard key).
func (r *reconciler) createStreams(ctx context.Context, prefix string, count int) ([]int, error) {
	shards := commands.ShardRange(0, count)
	kc, err := r.readKeys(ctx, prefix, shards, true)
	if err != nil {
		return nil, err
	}
	var existing []string
	if kc.Bare != "none" {
		existing = append(existing, prefix)
	}
	for _, s := range shards {
		if kc.Types[s] != "none" {
			existing = append(existing, routing.StreamKey(prefix, s))
		}
		if !commands.FenceUsable(kc.Fences[s]) {
			existing = append(existing, routing.FenceKey(routing.StreamKey(prefix, s)))
		}
	}
	if err := commands.KeysExist(prefix, existing); err != nil {
		return nil, err
	}
	keys := make([]string, len(shards))
	for i, s := range shards {
		keys[i] = routing.StreamKey(prefix, s)
	}
	existed, err := r.prov.CreateStreams(ctx, keys)
	if err != nil {
		return nil, commands.Failed(commands.ErrProvisioningFailed, err, "Failed to provision Redis Stream resources for %s", prefix)
	}
	if err := commands.KeysExist(prefix, existed); err != nil {
		return nil, err
	}
	r.configureIDMP(ctx, prefix, shards)
	return shards, nil
}

// AdoptStream takes over existing shard streams <p>:0..shardCount-1 without
// creating anything: every one must exist (a missing one is 400 naming it,
// nothing written); refused (409) when the stream has metadata or groups.
// The coordinator never deletes an adopted stream.
func (s *Service) AdoptStream(ctx context.Context, meta events.Meta, in commands.AdoptStreamInput) (projection.StreamView, error) {
	k := projection.GroupKey{StreamPrefix: in.StreamPrefix}
	by := commands.OwnerOfCaller(meta.Actor)
	return admin(ctx, s, meta, k, "stream.adopt", in.RequestedBy, func(meta events.Meta) (projection.StreamView, error) {
		count, err := s.rules.CheckAdoptStream(in)
		if err != nil {
			return projection.StreamView{}, err
		}
		prefix := in.StreamPrefix
		unlock := s.locks.lock(prefix)
		defer unlock()
		if err := s.committed.peek(func(t *commands.Tx) error { return commands.StreamCreatable(t, prefix, count, by) }); err != nil {
			return projection.StreamView{}, err
		}
		kc, err := s.rec.readKeys(ctx, prefix, commands.ShardRange(0, count), false)
		if err != nil {
			return projection.StreamView{}, err
		}
		for i := 0; i < count; i++ {
			if ft := kc.Fences[i]; !commands.FenceUsable(ft) {
				return projection.StreamView{}, commands.WithMsg(commands.ErrPrefixExists, "%s is a %s, not a fence hash: the coordinator cannot fence %s's publishes (remove it)", routing.FenceKey(routing.StreamKey(prefix, i)), ft, routing.StreamKey(prefix, i))
			}
			switch typ := kc.Types[i]; typ {
			case "stream":
			case "none":
				return projection.StreamView{}, commands.WithMsg(commands.ErrInvalid, "Redis has no stream %s to adopt: every %s:0..%d must exist", routing.StreamKey(prefix, i), prefix, count-1)
			default:
				return projection.StreamView{}, commands.WithMsg(commands.ErrInvalid, "%s is a %s, not a stream: only streams can be adopted", routing.StreamKey(prefix, i), typ)
			}
		}
		return submit(ctx, s.dec, meta, func(t *commands.Tx) (projection.StreamView, error) {
			return commands.AdoptStream(t, in, count, by)
		})
	})
}

// scaleBareStream changes the layout of a stream with metadata and no
// group at once: the new shard streams are created (empty, no consumer
// group), removed ones are left in place, and stream.scaled records it.
// ok false: the stream has groups (or no metadata); the caller scales them.
func (s *Service) scaleBareStream(ctx context.Context, meta events.Meta, prefix string, in commands.ScaleInput) (commands.StreamScaleResult, bool, error) {
	target := *in.TargetShardCount
	var plan commands.BareScale
	var st *projection.Stream
	bare := false
	err := s.committed.peek(func(t *commands.Tx) error {
		cur := t.B.Overlay.Stream(prefix)
		if cur == nil || !cur.Metadata || len(t.GroupsWithPrefix(prefix)) > 0 {
			return nil
		}
		bare, st = true, cur.Clone()
		plan.From, plan.MV = cur.ShardCount, cur.MetadataVersion
		return commands.BareScalable(t, prefix, target, plan)
	})
	if err != nil || !bare {
		return commands.StreamScaleResult{}, bare, err
	}
	unlock := s.locks.lock(prefix)
	defer unlock()
	if s.rules.Provisioning && target > plan.From {
		kc, err := s.rec.readKeys(ctx, prefix, commands.ShardRange(plan.From, target), false)
		if err != nil {
			return commands.StreamScaleResult{}, true, err
		}
		if plan.Created, err = commands.Claim(st, false, kc, commands.ShardRange(plan.From, target)); err != nil {
			return commands.StreamScaleResult{}, true, err
		}
		keys := make([]string, len(plan.Created))
		for i, sh := range plan.Created {
			keys[i] = routing.StreamKey(prefix, sh)
		}
		existed, err := s.rec.prov.CreateStreams(ctx, keys)
		if err != nil {
			return commands.StreamScaleResult{}, true, commands.Failed(commands.ErrProvisioningFailed, err, "Failed to provision Redis Stream resources for %s", prefix)
		}
		if len(existed) > 0 {
			return commands.StreamScaleResult{}, true, commands.WithMsg(commands.ErrPrefixExists, "Redis got keys of stream prefix '%s' while it was scaled: %s; nothing was changed", prefix, strings.Join(existed, ", "))
		}
		s.rec.configureIDMP(ctx, prefix, plan.Created)
	}
	if err := s.rec.fenceBare(ctx, prefix, plan, target); err != nil {
		return commands.StreamScaleResult{}, true, err
	}
	res, err := submit(ctx, s.dec, meta, func(t *commands.Tx) (commands.StreamScaleResult, error) {
		return commands.ScaleBare(t, prefix, in, plan)
	})
	if err != nil && !errors.Is(err, errUnknownOutcome) {
		s.rec.lowerFencesTo(ctx, projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: routing.StreamFenceField}, plan.From, plan.MV)
	}
	return res, true, err
}

// checkBareFences is the shard check's safety net for streams without
// groups (checkFences covers the others): a stream fence left above the
// stream's version by a scale whose append failed without saying whether it
// landed (fenceBare) is lowered, with the prefix lock held.
func (r *reconciler) checkBareFences(ctx context.Context) {
	if r.fencer == nil {
		return
	}
	for _, prefix := range r.state.StreamPrefixes() {
		if !r.mayAct(ctx) {
			return
		}
		unlock := r.locks.lock(prefix) // first: a scale holds it from its fences to its record
		if st, groups := r.state.StreamWithGroups(prefix); st != nil && st.Metadata && len(groups) == 0 && st.ShardCount > 0 {
			r.lowerFencesTo(ctx, projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: routing.StreamFenceField}, st.ShardCount, st.MetadataVersion)
		}
		unlock()
	}
}

// fenceBare raises, before a stream without groups changes its layout, the
// stream's fence (routing.StreamFenceField) on each shard of the old layout
// that loses keys to the version the change takes the stream to, as a
// group's layout change does (ordering.go): producers that route by the
// stream and publish idempotently rely on it. The caller holds the prefix
// lock.
func (r *reconciler) fenceBare(ctx context.Context, prefix string, plan commands.BareScale, target int) error {
	if r.fencer == nil {
		return nil
	}
	shards := make([]events.CutoverShard, 0, plan.From)
	for i := 0; i < plan.From; i++ {
		if routing.LosesKeys(plan.From, target, i) {
			shards = append(shards, events.CutoverShard{Index: i, Raise: true})
		}
	}
	if len(shards) == 0 {
		return nil
	}
	rctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if _, err := r.fencer.Cutover(rctx, prefix, routing.StreamFenceField, plan.MV+1, 0, shards); err != nil {
		r.lowerFencesTo(ctx, projection.GroupKey{StreamPrefix: prefix, ConsumerGroup: routing.StreamFenceField}, plan.From, plan.MV)
		return commands.Failed(commands.ErrUnavailable, err, "could not raise the stream fences of %s in Redis", prefix)
	}
	return nil
}
