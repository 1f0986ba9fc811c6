package main

import (
	"context"
	"time"

	"github.com/rscoord/rsc/httpapi"
	"github.com/rscoord/rsc/redisstore"
	"github.com/rscoord/rsc/wire"
)

// streamReader adapts redisstore.Shards to httpapi.StreamReader.
type streamReader struct{ s *redisstore.Shards }

func strPtr(s string) *string {
	if s == "" {
		return nil
	}
	return &s
}

func (a streamReader) Offsets(ctx context.Context, prefix, group string, shards []int) ([]wire.ShardOffset, error) {
	offs, err := a.s.Offsets(ctx, prefix, group, shards)
	if err != nil {
		return nil, err
	}
	out := make([]wire.ShardOffset, len(offs))
	for i, o := range offs {
		out[i] = wire.ShardOffset{
			StreamPrefix: prefix, ConsumerGroup: group, Shard: wire.ShardRef{ShardIndex: o.ShardIndex},
			ShardStream: wire.ShardStream{
				StreamKey: o.StreamKey, RedisSlot: o.Slot, StreamLength: o.Length,
				FirstRecordID: strPtr(o.FirstID), LastRecordID: strPtr(o.LastID), LastGeneratedID: strPtr(o.LastGeneratedID),
				GroupLastDeliveredID: strPtr(o.GroupLastDeliveredID), PendingCount: o.Pending, Lag: o.Lag,
				RedisNodeEndpoint: strPtr(o.NodeEndpoint), RedisNodeID: strPtr(o.NodeID),
				RedisSlotRangeStart: o.SlotStart, RedisSlotRangeEnd: o.SlotEnd,
			},
			MemoryUsageBytes: o.MemoryBytes, Exists: o.Exists,
		}
		lagAges(&out[i].ShardStream, o)
	}
	return out, nil
}

// lagAges fills in the lag in time of one shard stream (redisstore.Offset's
// LagAge and OldestPendingAge) and what it was computed from.
func lagAges(w *wire.ShardStream, o redisstore.Offset) {
	if d, ok := o.LagAge(); ok {
		w.LagSeconds = seconds(d)
	}
	if d, ok := o.OldestPendingAge(); ok {
		w.OldestPendingSeconds = seconds(d)
	}
	w.OldestUndeliveredID, w.OldestPendingID = strPtr(o.OldestUndeliveredID), strPtr(o.OldestPendingID)
	if o.Exists {
		ms := o.RedisTimeMs
		w.RedisTimeMs = &ms
	}
}

// seconds is d in seconds, to the millisecond.
func seconds(d time.Duration) *float64 {
	s := float64(d.Milliseconds()) / 1000
	return &s
}

func (a streamReader) Messages(ctx context.Context, key string, q httpapi.MessagesQuery) (httpapi.StreamPage, error) {
	msgs, more, cut, err := a.s.Messages(ctx, key, q)
	if err != nil {
		return httpapi.StreamPage{}, err
	}
	out := make([]wire.StreamRecord, len(msgs))
	for i, m := range msgs {
		r := wire.StreamRecord{StreamKey: key, RecordID: m.ID, Fields: m.Fields, FieldsTruncated: m.Truncated}
		if p, ok := m.Fields["payload"]; ok {
			p := p
			r.Payload = &p
		}
		if ms, ok := redisstore.IDMillis(m.ID); ok {
			r.RecordTimestampMs = &ms
			t := time.UnixMilli(ms).UTC()
			r.RecordTime = &t
		}
		out[i] = r
	}
	return httpapi.StreamPage{Records: out, More: more, BytesCut: cut}, nil
}

func (a streamReader) Ping(ctx context.Context) error { return a.s.Ping(ctx) }
